/*
 * insert.c - putting records into the shared WAL buffers.
 *
 * Several processes insert at once (PostgreSQL's design, simplified to one
 * progress slot per process):
 *   1. assemble the record in process memory (FPIs decided against the
 *      redo pointer read before assembling);
 *   2. mark our slot busy, then under insert_lock check that the redo
 *      pointer has not moved (if it has, FPIs may be missing: assemble
 *      again) and reserve [start, end) by advancing the insert position;
 *   3. copy the record into the buffer pages in parallel with others,
 *      writing page headers (CONT, rem_len) where it crosses pages, and
 *      advertising progress before anything that may block;
 *   4. mark the slot idle.
 * Records are never torn in memory: a writer only writes up to a position
 * below which every reserved byte has been copied (wal_wait_insertions).
 *
 * The buffers are a ring of nbufs 8 KiB pages; wal_page_end[i] holds the
 * end LSN of the page that ring slot i currently holds.  Re-mapping a slot
 * to a newer page first requires its old page to be written out.
 */
#include "wal/wal_int.h"

#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <zstd.h>

#include "fdcache/fdcache.h"

wal_shared *wal_sh;
char *wal_bufs;
_Atomic uint64_t *wal_page_end;
wal_slot *wal_slots;

static wal_backend wal_default = {
    .slot = -1, .reg = {.chunks = wal_default.reg.fixed, .cap = WAL_STATIC_CHUNKS}};
WR_TLS wal_backend *wal_me = &wal_default;

/* ---------------------------------------------------------------- backends */

wal_backend *wal_backend_new(int slot)
{
	wal_backend *b = calloc(1, sizeof(*b));
	if (b == NULL)
		return NULL;
	b->slot = slot;
	b->reg.chunks = b->reg.fixed;
	b->reg.cap = WAL_STATIC_CHUNKS;
	return b;
}

void wal_backend_free(wal_backend *b)
{
	if (b == NULL || b == &wal_default)
		return;
	if (wal_me == b)
		wal_me = &wal_default;
	if (b->reg.chunks != b->reg.fixed)
		free(b->reg.chunks);
	free(b->scratch.buf);
	ZSTD_freeCCtx(b->cctx);
	free(b);
}

void wal_backend_set(wal_backend *b)
{
	wal_me = b != NULL ? b : &wal_default;
}

/* ---------------------------------------------------------------- shared memory */

static uint32_t nbufs_for(const wr_options *o)
{
	return (uint32_t)(o->wal_buffers / WAL_PAGE_SIZE);
}

size_t wal_shmem_size(const wr_options *o, int nslots)
{
	uint32_t nbufs = nbufs_for(o);
	return WR_ALIGN_UP(sizeof(wal_shared), 64) + (size_t)nbufs * sizeof(uint64_t) +
	       (size_t)nslots * sizeof(wal_slot) + 4096 + (size_t)nbufs * WAL_PAGE_SIZE;
}

static void set_pointers(void)
{
	wal_bufs = shm_ptr(wal_sh->bufs_off);
	wal_page_end = shm_ptr(wal_sh->page_end_off);
	wal_slots = shm_ptr(wal_sh->slots_off);
}

/*
 * wal_direct_io=auto: O_DIRECT, unless an archiver or a WAL sender will read
 * the segments back (PostgreSQL's open_datasync used O_DIRECT only without
 * archiving or streaming, for the same reason: their reads would then come
 * from the disk).  Otherwise only recovery reads WAL, and keeping it out of
 * the page cache spares the kernel a write-back of dirty WAL pages and the
 * memory for them: a 1M-key fillseq after 10 s of idle went from 2.8-2.9 M
 * to 4.1-4.4 M puts/s (docs/performance.md).
 */
static bool direct_for(const wr_options *o)
{
	if (o->wal_direct_io != WR_DIRECT_AUTO)
		return o->wal_direct_io == WR_DIRECT_ON;
	return !o->archive_mode && o->listen_replication[0] == '\0';
}

int wal_shmem_init(const wr_options *o, const char *datadir, int nslots)
{
	size_t size = wal_shmem_size(o, nslots);
	char *base = shm_alloc("wal", size);
	if (base == NULL)
		return wr_error(WALRUS_ENOMEM, "no room for the WAL in shared memory");
	wal_sh = (wal_shared *)base;
	wal_sh->seg_size = (uint64_t)o->wal_segment_size;
	wal_sh->nbufs = nbufs_for(o);
	wal_sh->nslots = (uint32_t)nslots;
	wal_sh->sync_method = o->wal_sync_method;
	wal_sh->io_method = o->io_method;
	wal_sh->zstd_level =
	    o->wal_compression == WR_COMPRESS_ZSTD ? (int)o->wal_compression_level : 0;
	atomic_store(&wal_sh->direct, direct_for(o));
	wal_sh->direct_auto = o->wal_direct_io == WR_DIRECT_AUTO;
	wal_sh->fpw = o->full_page_writes;
	wal_sh->max_wal_size = o->max_wal_size;
	/* Ready segments stay a small part of max_wal_size: an eighth, at most
	 * WAL_PREALLOC_MAX (a load outruns one segment ahead, not eight). */
	wal_sh->prealloc_max = (uint32_t)WR_MAX(
	    1, WR_MIN(WAL_PREALLOC_MAX, o->max_wal_size / o->wal_segment_size / 8));
	atomic_store(&wal_sh->prealloc_ahead, 1);
	wal_sh->gather_ns = (uint64_t)o->commit_gather_us * 1000;
	/* As PostgreSQL: leave room for the checkpoint to finish within max_wal_size. */
	wal_sh->ckpt_wal_bytes =
	    (uint64_t)((double)o->max_wal_size / (1.0 + o->checkpoint_completion_target));
	if (!wr_snprintf(wal_sh->waldir, sizeof(wal_sh->waldir), "%s/wal", datadir))
		return wr_error(WALRUS_EINVAL, "path too long: \"%s\"", datadir);
	char *p = base + WR_ALIGN_UP(sizeof(wal_shared), 64);
	wal_sh->page_end_off = shm_off(p);
	p += (size_t)wal_sh->nbufs * sizeof(uint64_t);
	wal_sh->slots_off = shm_off(p);
	p += (size_t)nslots * sizeof(wal_slot);
	/* O_DIRECT wants buffers aligned to the logical block size: a page is plenty. */
	p = (char *)WR_ALIGN_UP((uintptr_t)p, 4096);
	wal_sh->bufs_off = shm_off(p);
	spin_init(&wal_sh->insert_lock);
	spin_init(&wal_sh->buf_lock);
	spin_init(&wal_sh->rslot_lock);
	rw_init(&wal_sh->write_lock);
	set_pointers();
	return WALRUS_OK;
}

int wal_attach(int slot)
{
	size_t size;
	wal_sh = shm_lookup("wal", &size);
	if (wal_sh == NULL)
		return wr_error(WALRUS_EPROTO, "shared memory has no WAL region");
	if (slot < -1 || slot >= (int)wal_sh->nslots) /* -1: backends bring their own */
		return wr_error(WALRUS_EINTERNAL, "WAL slot %d out of range", slot);
	set_pointers();
	wal_default.slot = slot;
	wal_forget_segment();
	return WALRUS_OK;
}

void wal_detach(void)
{
	wal_forget_segment();
	wal_sh = NULL;
	wal_default.slot = -1;
}

_Atomic uint32_t *wal_writer_latch(void)
{
	return &wal_sh->writer_latch;
}

_Atomic uint32_t *wal_ckpt_latch(void)
{
	return &wal_sh->ckpt_latch;
}

void wal_wake_workers(void)
{
	atomic_fetch_add(&wal_sh->ckpt_latch, 1);
	ipc_wake_all(&wal_sh->ckpt_latch);
	atomic_fetch_add(&wal_sh->writer_latch, 1);
	ipc_wake_all(&wal_sh->writer_latch);
}

bool wal_take_ckpt_request(void)
{
	return atomic_exchange(&wal_sh->ckpt_requested, 0) != 0;
}

/* Checked only when a record enters a new segment: cheap, and often enough. */
static void maybe_request_checkpoint(uint64_t start, uint64_t end)
{
	if (start / wal_sh->seg_size == end / wal_sh->seg_size)
		return;
	uint64_t redo = atomic_load(&wal_sh->redo);
	if (end - redo < wal_sh->ckpt_wal_bytes || atomic_load(&wal_sh->ckpt_requested))
		return;
	atomic_store(&wal_sh->ckpt_requested, 1);
	atomic_fetch_add(&wal_sh->ckpt_latch, 1);
	ipc_wake_all(&wal_sh->ckpt_latch);
}

/*
 * Stamps the pages holding [from, upto), about to be written, with the
 * position all WAL before which is durable now.  The writer holds
 * write_lock and the pages are fully inserted, so nobody else writes their
 * headers; inserters may still be copying into the last page, after the
 * header.
 */
void wal_stamp_durable(uint64_t from, uint64_t upto, uint64_t durable)
{
	for (uint64_t p = from - from % WAL_PAGE_SIZE; p < upto; p += WAL_PAGE_SIZE) {
		((wal_page_header *)wal_buf_page(p))->durable = durable;
	}
}

/* ---------------------------------------------------------------- positions */

static uint64_t seg_size(void)
{
	return wal_sh->seg_size;
}

/* The start of the next record after one that ends at @end. */
static uint64_t next_start(uint64_t end)
{
	uint64_t n = wal_align(end);
	if (n % WAL_PAGE_SIZE == 0)
		n += wal_page_header_size(n, seg_size());
	return n;
}

static void init_page(char *page, uint64_t page_start)
{
	memset(page, 0, WAL_PAGE_SIZE);
	wal_page_header *h = (wal_page_header *)page;
	h->magic = WAL_PAGE_MAGIC;
	h->pageaddr = page_start;
	if (page_start % seg_size() == 0) {
		wal_long_page_header *lh = (wal_long_page_header *)page;
		h->info |= WAL_PAGE_LONG;
		lh->sysid = wal_sh->sysid;
		lh->seg_size = (uint32_t)seg_size();
		lh->page_size = WAL_PAGE_SIZE;
	}
}

int wal_start_insert_at(wr_lsn end, wr_lsn prev, wr_lsn redo, uint64_t sysid, const void *last_page)
{
	uint64_t page_start = end - end % WAL_PAGE_SIZE;
	wal_sh->sysid = sysid;
	wal_sh->cur_end = end;
	wal_sh->cur_start = next_start(end);
	wal_sh->prev_start = prev;
	atomic_store(&wal_sh->redo, redo);
	atomic_store(&wal_sh->write_lsn, end);
	atomic_store(&wal_sh->flush_lsn, end);
	atomic_store(&wal_sh->prealloc_end, 0);
	for (uint32_t i = 0; i < wal_sh->nbufs; i++)
		atomic_store(&wal_page_end[i], 0);
	/* The page holding the end continues: it must be rewritten whole, with
	 * what it already has, when the next record lands on it. */
	wal_sh->init_upto = page_start;
	if (end % WAL_PAGE_SIZE != 0) {
		char *page = wal_buf_page(page_start);
		memcpy(page, last_page, WAL_PAGE_SIZE);
		memset(page + end % WAL_PAGE_SIZE, 0, WAL_PAGE_SIZE - end % WAL_PAGE_SIZE);
		/* What follows is in this walrus's format, and the page says so: a
		 * walrus that does not read it refuses the page instead of reading
		 * those records as its own (wal.h, "WAL formats"). */
		((wal_page_header *)page)->magic = WAL_PAGE_MAGIC;
		atomic_store(&wal_page_end[wal_buf_index(page_start)], page_start + WAL_PAGE_SIZE);
		wal_sh->init_upto = page_start + WAL_PAGE_SIZE;
	}
	atomic_store(&wal_sh->started, 1);
	return WALRUS_OK;
}

uint64_t wal_reserved_end(void)
{
	spin_lock(&wal_sh->insert_lock);
	uint64_t e = wal_sh->cur_end;
	spin_unlock(&wal_sh->insert_lock);
	return e;
}

wr_lsn wal_insert_lsn(void)
{
	return wal_reserved_end();
}

wr_lsn wal_redo_lsn(void)
{
	return atomic_load(&wal_sh->redo);
}

uint64_t wal_since_redo(void)
{
	uint64_t end = wal_reserved_end(), redo = wal_redo_lsn();
	return end > redo ? end - redo : 0;
}

wr_lsn wal_set_redo_here(void)
{
	spin_lock(&wal_sh->insert_lock);
	uint64_t redo = wal_sh->cur_start;
	atomic_store(&wal_sh->redo, redo);
	spin_unlock(&wal_sh->insert_lock);
	return redo;
}

/* ---------------------------------------------------------------- buffer pages */

static void advertise(uint64_t pos)
{
	atomic_store(&wal_slots[wal_me->slot].done_upto, WR_MAX(pos, 2));
}

/*
 * Maps the next page in LSN order (init_upto) to its ring slot, once the
 * page that slot held is written, unless @want is mapped already.  Pages
 * are mapped strictly in order: mapping a later page first could take the
 * slot of a page an inserter has reserved but not reached yet.  And never
 * past @want: an inserter that saw its page unmapped and lost the race to
 * map it would otherwise map the page after, and with several racing, the
 * pages mapped ran a ring ahead of the reservations; mapping the next one
 * then waited for a write of the page an inserter was still filling, and
 * that inserter was the one waiting (a livelock, seen with 8 committers on
 * a ring of 8 pages).  Returns false when it had to write first.
 */
static bool map_next_page(uint64_t want)
{
	spin_lock(&wal_sh->buf_lock);
	uint64_t next = wal_sh->init_upto;
	if (next > want) {
		spin_unlock(&wal_sh->buf_lock);
		return true;
	}
	uint32_t idx = wal_buf_index(next);
	uint64_t old = atomic_load(&wal_page_end[idx]);
	if (old != 0 && atomic_load(&wal_sh->write_lsn) < old) {
		spin_unlock(&wal_sh->buf_lock);
		atomic_fetch_add_explicit(&wal_sh->st_buffer_full_waits, 1, memory_order_relaxed);
		wal_write_upto(old);
		return false;
	}
	init_page(wal_buf_page(next), next);
	atomic_store_explicit(&wal_page_end[idx], next + WAL_PAGE_SIZE, memory_order_release);
	wal_sh->init_upto = next + WAL_PAGE_SIZE;
	spin_unlock(&wal_sh->buf_lock);
	return true;
}

/*
 * The buffer for the WAL page starting at @page_start, mapping pages up to
 * it when needed.  The caller has advertised its progress: this may have to
 * write WAL first, which waits for other inserters.  A reserved page cannot
 * be written out (and its slot reused) before its inserter has finished
 * with it, because writers never pass an unfinished insertion.
 */
static char *get_page(uint64_t page_start)
{
	uint32_t idx = wal_buf_index(page_start);
	uint64_t want = page_start + WAL_PAGE_SIZE;
	for (;;) {
		uint64_t have = atomic_load_explicit(&wal_page_end[idx], memory_order_acquire);
		if (have == want)
			return wal_buf_page(page_start);
		if (have > want)
			wr_panic("WAL buffer for page " WAL_LSN_FMT
			         " holds a newer page " WAL_LSN_FMT,
			         WAL_LSN_ARGS(page_start), WAL_LSN_ARGS(have - WAL_PAGE_SIZE));
		map_next_page(page_start);
	}
}

/* The page's buffer; advertises @pos first when getting it may block. */
static char *page_for(uint64_t page_start, uint64_t pos)
{
	uint32_t idx = wal_buf_index(page_start);
	uint64_t have = atomic_load_explicit(&wal_page_end[idx], memory_order_acquire);
	if (have == page_start + WAL_PAGE_SIZE)
		return wal_buf_page(page_start);
	advertise(pos);
	return get_page(page_start);
}

/* Copies @len bytes of a record reserved at @start into the buffers. */
static void copy_record(uint64_t start, const char *rec, uint32_t len)
{
	uint64_t pos = start;
	uint32_t left = len;
	while (left > 0) {
		uint64_t page_start = pos - pos % WAL_PAGE_SIZE;
		char *page = page_for(page_start, pos);
		if (pos == page_start) {
			/* The record continues onto this page. */
			wal_page_header *h = (wal_page_header *)page;
			h->info |= WAL_PAGE_CONT;
			h->rem_len = left;
			pos += wal_page_header_size(page_start, seg_size());
		}
		uint32_t room = (uint32_t)(page_start + WAL_PAGE_SIZE - pos);
		uint32_t n = WR_MIN(room, left);
		memcpy(page + (pos - page_start), rec + (len - left), n);
		pos += n;
		left -= n;
	}
}

/* ---------------------------------------------------------------- insert */

/* Full-page images: as configured, and always while a base backup runs. */
static bool fpw_now(void)
{
	return wal_sh->fpw || atomic_load(&wal_sh->backup_running) != 0;
}

int wal_backup_begin(wr_lsn keep, uint32_t holder_pid)
{
	uint32_t idle = 0;
	if (!atomic_compare_exchange_strong(&wal_sh->backup_running, &idle, 1))
		return wr_error(WALRUS_EBUSY, "a base backup is already running on this instance");
	atomic_store(&wal_sh->backup_holder, holder_pid);
	atomic_store(&wal_sh->backup_keep, keep);
	return WALRUS_OK;
}

bool wal_backup_end_for(uint32_t holder_pid)
{
	/* Taking the holder word first: a backup another process began since is not ended. */
	uint32_t h = holder_pid;
	if (wal_sh == NULL || holder_pid == 0 ||
	    !atomic_compare_exchange_strong(&wal_sh->backup_holder, &h, 0))
		return false;
	atomic_store(&wal_sh->backup_keep, 0);
	atomic_store(&wal_sh->backup_running, 0);
	return true;
}

bool wal_backup_held_by(uint32_t pid)
{
	return wal_sh != NULL && pid != 0 && atomic_load(&wal_sh->backup_holder) == pid;
}

uint32_t wal_backup_holder(void)
{
	return wal_sh == NULL ? 0 : atomic_load(&wal_sh->backup_holder);
}

wr_lsn wal_backup_keep_lsn(void)
{
	return wal_sh == NULL ? 0 : atomic_load(&wal_sh->backup_keep);
}

static bool reserve(uint32_t len, uint64_t redo_used, uint64_t *start, uint64_t *end,
                    uint64_t *prev)
{
	spin_lock(&wal_sh->insert_lock);
	/* A checkpoint moved the redo pointer since we decided the FPIs: a page
	 * changed for the first time since then needs an image we did not take. */
	if (fpw_now() && atomic_load(&wal_sh->redo) != redo_used) {
		spin_unlock(&wal_sh->insert_lock);
		return false;
	}
	*start = wal_sh->cur_start;
	*prev = wal_sh->prev_start;
	*end = wal_lsn_advance(*start, len, seg_size());
	wal_sh->prev_start = *start;
	wal_sh->cur_end = *end;
	wal_sh->cur_start = next_start(*end);
	spin_unlock(&wal_sh->insert_lock);
	return true;
}

static void count_insert(const wal_assembled *a)
{
	atomic_fetch_add_explicit(&wal_sh->st_records, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&wal_sh->st_bytes, a->len, memory_order_relaxed);
	if (a->fpi_count) {
		atomic_fetch_add_explicit(&wal_sh->st_fpis, a->fpi_count, memory_order_relaxed);
		atomic_fetch_add_explicit(&wal_sh->st_fpi_raw, a->fpi_bytes_raw,
		                          memory_order_relaxed);
		atomic_fetch_add_explicit(&wal_sh->st_fpi_stored, a->fpi_bytes_stored,
		                          memory_order_relaxed);
	}
}

wr_lsn wal_insert_at(uint8_t rmid, uint8_t info, wr_lsn *start_out)
{
	uint64_t start, end, prev;
	wal_backend *me = wal_me;
	if (wal_sh == NULL || me->slot < 0 || !atomic_load(&wal_sh->started))
		wr_panic("WAL insert before the WAL is ready");
	wal_slot *slot = &wal_slots[me->slot];
	wal_assembled *a = &me->scratch;
	for (;;) {
		uint64_t redo = atomic_load(&wal_sh->redo);
		int rc = wal_assemble(a, rmid, info, redo, fpw_now(), wal_sh->zstd_level);
		if (rc != WALRUS_OK)
			wr_panic("could not assemble a WAL record: %s", walrus_errmsg());
		/* Busy before reserving, so a writer that read the insert
		 * position after our reservation waits for our copy. */
		atomic_store(&slot->done_upto, WAL_SLOT_BUSY);
		if (reserve(a->len, redo, &start, &end, &prev))
			break;
		atomic_store(&slot->done_upto, WAL_SLOT_IDLE);
	}
	wal_finish_record(a, prev);
	copy_record(start, a->buf, a->len);
	atomic_store(&slot->done_upto, WAL_SLOT_IDLE);
	count_insert(a);
	maybe_request_checkpoint(start, end);
	if (start_out)
		*start_out = start;
	return end;
}

wr_lsn wal_insert(uint8_t rmid, uint8_t info)
{
	return wal_insert_at(rmid, info, NULL);
}

/*
 * Reserves the switch record and the rest of the segment it ends in, under
 * one hold of the lock (nobody may reserve after it in that segment).
 * 1: reserved; 0: nothing was inserted since the segment began (a switch
 * would only waste a segment); -1: the redo pointer moved, assemble again.
 */
static int reserve_switch(uint32_t len, uint64_t redo_used, uint64_t *start, uint64_t *prev,
                          uint64_t *seg_end)
{
	uint64_t seg = seg_size();
	spin_lock(&wal_sh->insert_lock);
	int rc = wal_sh->cur_end % seg == 0 ? 0 : 1;
	if (rc == 1 && fpw_now() && atomic_load(&wal_sh->redo) != redo_used)
		rc = -1;
	if (rc == 1) {
		*start = wal_sh->cur_start;
		*prev = wal_sh->prev_start;
		uint64_t end = wal_lsn_advance(*start, len, seg);
		*seg_end = end % seg == 0 ? end : end - end % seg + seg;
		wal_sh->prev_start = *start;
		wal_sh->cur_end = *seg_end;
		wal_sh->cur_start = next_start(*seg_end);
	}
	spin_unlock(&wal_sh->insert_lock);
	return rc;
}

/* Maps the pages after the switch record up to @seg_end: the writer writes them as empty pages. */
static void fill_to_segment_end(uint64_t start, uint32_t len, uint64_t seg_end)
{
	uint64_t end = wal_lsn_advance(start, len, seg_size());
	uint64_t p = end % WAL_PAGE_SIZE == 0 ? end : end - end % WAL_PAGE_SIZE + WAL_PAGE_SIZE;
	for (; p < seg_end; p += WAL_PAGE_SIZE)
		(void)page_for(p, p);
}

wr_lsn wal_insert_switch(void)
{
	uint64_t start = 0, prev = 0, seg_end = 0;
	wal_backend *me = wal_me;
	if (wal_sh == NULL || me->slot < 0 || !atomic_load(&wal_sh->started))
		wr_panic("WAL switch before the WAL is ready");
	wal_slot *slot = &wal_slots[me->slot];
	wal_assembled *a = &me->scratch;
	int rc;
	do {
		uint64_t redo = atomic_load(&wal_sh->redo);
		wal_begin();
		if (wal_assemble(a, RM_XLOG, XLOG_SWITCH, redo, fpw_now(), 0) != WALRUS_OK)
			wr_panic("could not assemble a WAL record: %s", walrus_errmsg());
		atomic_store(&slot->done_upto, WAL_SLOT_BUSY);
		rc = reserve_switch(a->len, redo, &start, &prev, &seg_end);
		if (rc != 1)
			atomic_store(&slot->done_upto, WAL_SLOT_IDLE);
	} while (rc < 0);
	if (rc == 0)
		return 0;
	wal_finish_record(a, prev);
	copy_record(start, a->buf, a->len);
	fill_to_segment_end(start, a->len, seg_end);
	atomic_store(&slot->done_upto, WAL_SLOT_IDLE);
	count_insert(a);
	wal_flush_to(seg_end);
	return seg_end;
}

void wal_get_stats(wal_stats *s)
{
	memset(s, 0, sizeof(*s));
	if (wal_sh == NULL)
		return;
	s->direct_io = atomic_load(&wal_sh->direct);
	s->records = atomic_load(&wal_sh->st_records);
	s->bytes = atomic_load(&wal_sh->st_bytes);
	s->fpis = atomic_load(&wal_sh->st_fpis);
	s->fpi_bytes_raw = atomic_load(&wal_sh->st_fpi_raw);
	s->fpi_bytes_stored = atomic_load(&wal_sh->st_fpi_stored);
	s->writes = atomic_load(&wal_sh->st_writes);
	s->write_bytes = atomic_load(&wal_sh->st_write_bytes);
	s->flushes = atomic_load(&wal_sh->st_flushes);
	s->flush_ns = atomic_load(&wal_sh->st_flush_ns);
	s->buffer_full_waits = atomic_load(&wal_sh->st_buffer_full_waits);
	s->group_waits = atomic_load(&wal_sh->st_group_waits);
	s->gather_naps = atomic_load(&wal_sh->st_gather_naps);
	s->segments_created = atomic_load(&wal_sh->st_seg_created);
	s->segments_recycled = atomic_load(&wal_sh->st_seg_recycled);
	s->segments_removed = atomic_load(&wal_sh->st_seg_removed);
	s->segments_on_demand = atomic_load(&wal_sh->st_seg_on_demand);
	s->prealloc_ahead = atomic_load(&wal_sh->prealloc_ahead);
}
