/*
 * kv_write.c - the writer's side of a batch: the pages it holds, page
 * allocation and freeing, and the WAL records it builds.
 *
 * Only the holder of the tree lock (exclusive) writes, so it reads pages
 * with a pin and no content lock: nobody else changes them.  Before its
 * first change to a page it takes the exclusive content lock and keeps it,
 * with the pin, until the batch ends: then no process can write the page
 * out before the batch's last record is in the WAL buffers, and WAL before
 * data makes that record durable before any page of the batch reaches
 * disk.  Redo applies a batch only when its last record arrives, so a
 * crash shows either the whole batch or nothing.
 *
 * The same locks make a failed batch easy to undo: the image of every page
 * before its first change is kept, and an abort puts the images back (new
 * pages past the tree's end need nothing: the restored meta page does not
 * count them).  Its records are then void: an ABORT record says so, and
 * redo drops them anyway when the next batch starts.
 *
 * The meta page is kept in memory during a batch and logged once, in the
 * batch's last record: redo applies a batch whole, so only its final state
 * matters.
 *
 * Interface: kv_int.h, "kv_write.c".
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "buffer/buffer.h"
#include "kv/kv_int.h"

#define RB_DATA_MAX 60000u /* block data per record stays under the WAL's 64 KiB */

/* The calling backend's batch. */
#define W (kv_me->w)
/* ---------------------------------------------------------------- the page set */

static uint32_t hash_blk(wr_relid rel, wr_blkno blk)
{
	return ((blk + (rel - KV_REL) * 40503u) * 2654435761u) & (W.hcap - 1);
}

/* The current tree's @blk, if the batch has it. */
static kvw_page *set_find(wr_blkno blk)
{
	if (W.hcap == 0)
		return NULL;
	wr_relid rel = kv_cur_rel;
	for (uint32_t i = hash_blk(rel, blk);; i = (i + 1) & (W.hcap - 1)) {
		if (W.hash[i] == NULL || (W.hash[i]->blk == blk && W.hash[i]->rel == rel))
			return W.hash[i];
	}
}

static void hash_put(kvw_page *p)
{
	uint32_t i = hash_blk(p->rel, p->blk);
	while (W.hash[i] != NULL)
		i = (i + 1) & (W.hcap - 1);
	W.hash[i] = p;
}

/* Room for one more page in the array and the hash (kept at most half full). */
static int set_grow(void)
{
	if (W.n == W.cap) {
		uint32_t cap = W.cap ? W.cap * 2 : 64;
		kvw_page **a = realloc(W.pages, cap * sizeof(kvw_page *));
		if (a == NULL)
			return wr_error(WALRUS_ENOMEM, "out of memory for a batch's pages");
		W.pages = a;
		W.cap = cap;
	}
	if ((W.n + 1) * 2 <= W.hcap)
		return WALRUS_OK;
	uint32_t hcap = W.hcap ? W.hcap * 2 : 128;
	kvw_page **h = calloc(hcap, sizeof(kvw_page *));
	if (h == NULL)
		return wr_error(WALRUS_ENOMEM, "out of memory for a batch's pages");
	free(W.hash);
	W.hash = h;
	W.hcap = hcap;
	for (uint32_t i = 0; i < W.n; i++)
		hash_put(W.pages[i]);
	return WALRUS_OK;
}

/*
 * A batch may keep at most a quarter of the pool pinned: the rest must stay
 * available to readers and to the buffers the batch still has to read.
 */
static int check_pin_limit(void)
{
	uint32_t limit = buf_nbuffers() / 4;
	if (W.n < limit)
		return WALRUS_OK;
	return wr_error(WALRUS_ETOOBIG,
	                "batch too large: it needs more than %u pages pinned at once (a quarter "
	                "of shared_buffers, which is %u pages of 8kB); use smaller batches or a "
	                "larger shared_buffers",
	                limit, buf_nbuffers());
}

static void page_free(kvw_page *p)
{
	free(p->undo);
	free(p);
}

/* A page struct, from the spares when there is one (its undo buffer comes along). */
static kvw_page *page_new(void)
{
	if (W.nspare == 0)
		return calloc(1, sizeof(kvw_page));
	kvw_page *p = W.spare[--W.nspare];
	char *undo = p->undo;
	*p = (kvw_page){.undo = undo};
	return p;
}

static void page_done(kvw_page *p)
{
	if (W.nspare < KVW_SPARE)
		W.spare[W.nspare++] = p;
	else
		page_free(p);
}

static int set_add(wr_blkno blk, int buf, bool locked, bool fresh, kvw_page **out)
{
	kvw_page *p = page_new();
	int rc = p == NULL ? wr_error(WALRUS_ENOMEM, "out of memory") : set_grow();
	if (rc != WALRUS_OK) {
		if (p != NULL)
			page_done(p);
		if (locked)
			buf_unlock(buf);
		buf_release(buf);
		return rc;
	}
	p->rel = kv_cur_rel;
	p->blk = blk;
	p->buf = buf;
	p->page = buf_page(buf);
	p->locked = locked;
	p->member = fresh;
	p->fresh = fresh;
	W.pages[W.n++] = p;
	hash_put(p);
	*out = p;
	return WALRUS_OK;
}

int kvw_get(wr_blkno blk, kvw_page **out)
{
	*out = set_find(blk);
	if (*out != NULL)
		return WALRUS_OK;
	if (blk >= W.meta.nblocks)
		return wr_error(WALRUS_ECORRUPT,
		                "block %u of relation %u is past the tree's end (%u blocks)", blk,
		                kv_cur_rel, W.meta.nblocks);
	int rc = check_pin_limit();
	int buf;
	if (rc == WALRUS_OK)
		rc = buf_read(kv_cur_rel, blk, &buf);
	if (rc == WALRUS_OK)
		rc = set_add(blk, buf, false, false, out);
	return rc;
}

/*
 * The undo image keeps the page's content only: [0, lower) and [upper, end),
 * not the free space between, whose bytes no reader or writer looks at.  A
 * put saves two pages, its leaf and the meta page; the meta page's content
 * is a hundred bytes of its 8 KiB, a leaf's what it holds.  A page whose
 * header does not say where its free space is is saved whole.
 */
static void save_used(kvw_page *p)
{
	wr_page_header h = kvp_header(p->page);
	if (h.lower > h.upper || h.upper > WR_PAGE_SIZE) {
		h.lower = WR_PAGE_SIZE;
		h.upper = WR_PAGE_SIZE;
	}
	p->pre_lower = h.lower;
	p->pre_upper = h.upper;
	memcpy(p->pre, p->page, h.lower);
	memcpy(p->pre + h.upper, p->page + h.upper, WR_PAGE_SIZE - h.upper);
}

static void restore_used(kvw_page *p)
{
	memcpy(p->page, p->pre, p->pre_lower);
	memcpy(p->page + p->pre_upper, p->pre + p->pre_upper, WR_PAGE_SIZE - p->pre_upper);
}

/* The exclusive lock, kept to the batch's end. */
static void kvw_lock(kvw_page *p)
{
	if (!p->locked) {
		buf_lock(p->buf, true);
		p->locked = true;
	}
}

/* The undo buffer: an image of the page, then the items a lazy undo keeps. */
#define UNDO_SIZE (WR_PAGE_SIZE + KVW_LAZY_BYTES)

static int undo_buffer(kvw_page *p)
{
	if (p->undo == NULL && (p->undo = malloc(UNDO_SIZE)) == NULL)
		return wr_error(WALRUS_ENOMEM, "out of memory for a page's undo");
	return WALRUS_OK;
}

/* Takes the batch's inserts and replaces out of @page again, newest first,
 * and puts the header back as the batch found it (lower, upper, LSN). */
static void undo_lazy(char *page, const kvw_page *p)
{
	wr_page_header now = kvp_header(page), then;
	memcpy(&then, p->hdr0, sizeof(then));
	char *lps = page + WR_PAGE_HEADER_SIZE;
	int n = (now.lower - WR_PAGE_HEADER_SIZE) / KV_LP_SIZE;
	for (int i = p->nops - 1; i >= 0; i--) {
		const kvw_lazy_op *op = &p->ops[i];
		if (op->code == KVOP_INSERT) {
			memmove(lps + (size_t)op->slot * KV_LP_SIZE,
			        lps + (size_t)(op->slot + 1) * KV_LP_SIZE,
			        (size_t)(n - op->slot - 1) * KV_LP_SIZE);
			n--;
			continue;
		}
		/* A replace wrote its item over the old one, or under upper
		 * (lazy_covers): the old bytes and line pointer come back. */
		memcpy(lps + (size_t)op->slot * KV_LP_SIZE, &op->old, KV_LP_SIZE);
		memcpy(page + op->old.off, p->undo + WR_PAGE_SIZE + op->at, op->old.len);
	}
	memset(page + then.lower, 0, (size_t)(now.lower - then.lower)); /* as kvp_delete */
	memcpy(page, p->hdr0, WR_PAGE_HEADER_SIZE);
}

/* The image as the batch found the page, from a lazy undo: before an op
 * the lazy undo cannot take back. */
static int save_image(kvw_page *p)
{
	int rc = undo_buffer(p);
	if (rc != WALRUS_OK)
		return rc;
	p->pre = p->undo;
	save_used(p);
	if (p->lazy) {
		undo_lazy(p->pre, p);
		wr_page_header then = kvp_header(p->pre);
		p->pre_lower = then.lower;
		p->pre_upper = then.upper;
		p->lazy = false;
	}
	return WALRUS_OK;
}

/*
 * Before the batch's first change to @p.  The undo image of a put's leaf
 * was a copy of everything the leaf holds (7 KiB), and a random load's
 * batches touch about a thousand leaves each: kvw_modify was 12% of
 * fillrandom.  Most of those pages only take an insert or a few, or (a
 * transaction's) replace a value or two, which the header, the slots and
 * the old items undo: the image is made only when another op comes.
 */
int kvw_modify(kvw_page *p)
{
	kvw_lock(p);
	if (p->member)
		return WALRUS_OK;
	wr_page_header h = kvp_header(p->page);
	if (h.lower >= WR_PAGE_HEADER_SIZE && h.lower <= h.upper && h.upper <= WR_PAGE_SIZE) {
		memcpy(p->hdr0, p->page, WR_PAGE_HEADER_SIZE);
		p->lazy = true;
		p->nops = 0;
		p->kept = 0;
	} else {
		int rc = save_image(p);
		if (rc != WALRUS_OK)
			return rc;
	}
	p->member = true;
	return WALRUS_OK;
}

/*
 * Whether the lazy undo of @p can take this op too: an insert placed under
 * upper without compacting the page, or a replace of an item whose bytes
 * it has room to keep, written over the old item or under upper without
 * compacting (kvp_replace).  Then the op's undo is prepared in
 * p->ops[p->nops], counted once the op is applied.
 */
static bool lazy_covers(kvw_page *p, uint8_t code, uint16_t slot, uint16_t len)
{
	wr_page_header h = kvp_header(p->page);
	if (p->nops == KVW_LAZY_MAX)
		return false;
	kvw_lazy_op *op = &p->ops[p->nops];
	op->code = code;
	op->slot = slot;
	if (code == KVOP_INSERT)
		return h.upper - h.lower >= (int)len + KV_LP_SIZE;
	if (code != KVOP_REPLACE || slot >= kvp_nslots(p->page))
		return false;
	op->old = kvp_lp(p->page, slot);
	if (op->old.len > KVW_LAZY_BYTES - p->kept || op->old.off < h.upper ||
	    op->old.off + op->old.len > WR_PAGE_SIZE ||
	    (len > op->old.len && h.upper - h.lower < (int)len) || undo_buffer(p) != WALRUS_OK) {
		wr_error_clear(); /* no buffer: the image's own allocation reports it */
		return false;
	}
	op->at = p->kept;
	memcpy(p->undo + WR_PAGE_SIZE + p->kept, p->page + op->old.off, op->old.len);
	p->kept = (uint16_t)(p->kept + op->old.len);
	return true;
}

kv_meta *kvw_meta(void)
{
	return &W.meta;
}

uint32_t kvw_pinned(void)
{
	return W.n;
}

bool kvw_pin_room(uint32_t n)
{
	return W.n + n <= buf_nbuffers() / 4;
}

uint64_t kvw_next_value_id(void)
{
	return W.meta.next_value_id++;
}

void kvw_count_split(void)
{
	W.splits++;
}

void kvw_count_fastpath(void)
{
	W.fastpath++;
}

void kvw_count_hinted(void)
{
	W.hinted++;
}

void kvw_count_shift(void)
{
	W.shifts++;
}

/* ---------------------------------------------------------------- allocation */

static int alloc_from_free_list(kvw_page **out)
{
	int rc = kvw_get(W.meta.free_head, out);
	if (rc != WALRUS_OK)
		return rc;
	uint8_t t = kvp_type((*out)->page);
	if (t != KV_PT_FREE && t != KV_PT_OVF)
		return wr_error(WALRUS_ECORRUPT,
		                "block %u of relation %u is on the free list but is not free",
		                (*out)->blk, kv_cur_rel);
	W.meta.free_head = kvp_special((*out)->page).right;
	W.meta.nfree--;
	W.reused++;
	kv_sh->free_gen++;
	return kvw_modify(*out);
}

/*
 * The data file grows ahead of the tree, by an eighth of its size (at least
 * a block, at most KV_GROW_MAX): an ascending load of N pages then costs
 * about N / KV_GROW_MAX growths and size checks instead of N of each.  The
 * blocks past meta.nblocks are zeroes nobody logged; the tree takes them
 * in order, after a crash too, so none is ever read as data.
 */
#define KV_GROW_MAX 128u /* 1 MiB */

static wr_blkno grow_step(wr_blkno nfile)
{
	return WR_MIN(WR_MAX(nfile / 8, 1u), KV_GROW_MAX);
}

/* Allocates blocks [@from, @from + *@step), or on a full disk only the
 * @need the writer wants now (*@step becomes that). */
static int allocate_run(smgr_rel *r, wr_blkno from, wr_blkno need, wr_blkno *step)
{
	int rc = smgr_grow(r, from, *step);
	if (rc == WALRUS_ENOSPC && *step > need) {
		/* A full disk may still have room for the block needed now. */
		wr_log(WR_WARNING, "%s; allocating %u block(s) of relation %u instead of %u",
		       walrus_errmsg(), need, kv_cur_rel, *step);
		*step = need;
		rc = smgr_grow(r, from, *step);
	}
	return rc;
}

/* Grows the file of @nfile blocks to hold block @blk; *nfile becomes its new size. */
static int grow_file(smgr_rel *r, wr_blkno blk, wr_blkno *nfile)
{
	wr_blkno need = blk + 1 - *nfile, step = WR_MAX(need, grow_step(*nfile));
	int rc = allocate_run(r, *nfile, need, &step);
	if (rc != WALRUS_OK)
		return rc;
	atomic_fetch_add(&kv_sh->file_grows, 1);
	*nfile += step;
	return WALRUS_OK;
}

/*
 * Makes block @blk exist, allocated, in the data file; the writer's count of
 * allocated blocks saves the check below it.  Past that count but inside the
 * file, a compaction may have punched holes (kv_compact.c, in this instance
 * or an earlier one: then the file is sparse): there each run is allocated
 * again, as growth would be, so a full disk shows as an error now and not as
 * a failed write-back later.  A file without holes is used as it is.
 */
static int ensure_block(wr_blkno blk)
{
	kv_tree_sh *t = kv_tree_claim();
	if (blk < t->file_blocks)
		return WALRUS_OK;
	smgr_rel *r;
	wr_blkno nfile;
	int rc = smgr_open(kv_cur_rel, &r);
	if (rc == WALRUS_OK)
		rc = smgr_nblocks(r, &nfile);
	if (rc != WALRUS_OK)
		return rc;
	atomic_fetch_add(&kv_sh->size_checks, 1);
	if (blk >= nfile) {
		rc = grow_file(r, blk, &nfile);
	} else {
		if (!t->holes_known) {
			rc = smgr_sparse(r, &t->holes);
			t->holes_known = rc == WALRUS_OK;
		}
		if (rc == WALRUS_OK && t->holes) {
			wr_blkno n = WR_MIN(grow_step(blk), nfile - blk);
			rc = allocate_run(r, blk, 1, &n);
			nfile = blk + n;
		}
	}
	if (rc == WALRUS_OK)
		t->file_blocks = nfile;
	return rc;
}

/* Block meta.nblocks: a leftover of a crash, a block grown ahead, or one grown now. */
static int alloc_at_end(kvw_page **out)
{
	wr_blkno blk = W.meta.nblocks;
	int buf;
	int rc = check_pin_limit();
	if (rc == WALRUS_OK)
		rc = ensure_block(blk);
	if (rc == WALRUS_OK)
		rc = buf_read_zero(kv_cur_rel, blk, &buf);
	if (rc != WALRUS_OK)
		return rc;
	W.meta.nblocks++;
	return set_add(blk, buf, true, true, out);
}

int kvw_alloc(kvw_page **out)
{
	if (W.meta.free_head != WR_INVALID_BLKNO)
		return alloc_from_free_list(out);
	return alloc_at_end(out);
}

int kvw_free_page(kvw_page *p)
{
	char img[WR_PAGE_SIZE];
	kvf_init(img, W.meta.free_head);
	int rc = kvw_op_image(p, img);
	if (rc == WALRUS_OK) {
		W.meta.free_head = p->blk;
		W.meta.nfree++;
		W.freed++;
		kv_sh->free_gen++;
	}
	return rc;
}

/* Links a chain of @n overflow pages [first .. last] to the free list as it is. */
int kvw_free_chain(kvw_page *last, wr_blkno first, uint32_t n)
{
	kv_special s = kvp_special(last->page);
	s.right = W.meta.free_head;
	int rc = kvw_op_special(last, &s);
	if (rc == WALRUS_OK) {
		W.meta.free_head = first;
		W.meta.nfree += n;
		W.freed += n;
		kv_sh->free_gen++;
	}
	return rc;
}

/* ---------------------------------------------------------------- the record builder */

static rb_block *rb_slot(kvw_page *p, size_t need)
{
	for (int i = 0; i < W.nrb; i++)
		if (W.rb[i].p == p)
			return &W.rb[i];
	if (W.nrb == WAL_MAX_BLOCKS)
		return NULL;
	rb_block *b = &W.rb[W.nrb++];
	b->p = p;
	b->flags = 0;
	b->len = 0;
	(void)need;
	return b;
}

static int rb_reserve(rb_block *b, size_t need)
{
	if (b->len + need <= b->cap)
		return WALRUS_OK;
	size_t cap = b->cap ? b->cap : 4096;
	while (cap < b->len + need)
		cap *= 2;
	char *o = realloc(b->ops, cap);
	if (o == NULL)
		return wr_error(WALRUS_ENOMEM, "out of memory building a WAL record");
	b->ops = o;
	b->cap = cap;
	return WALRUS_OK;
}

/* The record block of @p with room for @need more bytes, inserting the record when full. */
static int rb_block_for(kvw_page *p, size_t need, rb_block **out)
{
	rb_block *b = rb_slot(p, need);
	if (b == NULL || b->len + need > RB_DATA_MAX) {
		int rc = kvw_flush_record();
		if (rc != WALRUS_OK)
			return rc;
		b = rb_slot(p, need);
	}
	*out = b;
	return rb_reserve(b, need);
}

/*
 * kvw_op's body.  The payload is @payload, or with @image_page the compact
 * image of that page (kvw_op_image), encoded straight into the record.
 */
static int append_op(kvw_page *p, uint8_t code, uint16_t slot, const void *payload,
                     const char *image_page, uint16_t len)
{
	rb_block *b;
	int rc = kvw_modify(p);
	if (rc == WALRUS_OK && p->lazy && !lazy_covers(p, code, slot, len))
		rc = save_image(p);
	if (rc == WALRUS_OK)
		rc = rb_block_for(p, KVOP_HDR + (size_t)len, &b);
	if (rc != WALRUS_OK)
		return rc;
	char *op = b->ops + b->len;
	op[0] = (char)code;
	memcpy(op + 1, &slot, 2);
	memcpy(op + 3, &len, 2);
	if (image_page != NULL)
		kvop_image(image_page, op + KVOP_HDR);
	else if (len > 0)
		memcpy(op + KVOP_HDR, payload, len);
	char why[160];
	if (!kvop_apply(p->page, op, KVOP_HDR + (size_t)len, why, sizeof(why)))
		return wr_error(WALRUS_EINTERNAL, "page op on block %u of relation %u failed: %s",
		                p->blk, kv_cur_rel, why);
	if (p->lazy)
		p->nops++;
	if (code == KVOP_INIT && b->len == 0)
		b->flags |= WAL_BLK_WILL_INIT; /* rebuilt from the data alone */
	b->len += KVOP_HDR + (size_t)len;
	return WALRUS_OK;
}

int kvw_op(kvw_page *p, uint8_t code, uint16_t slot, const void *payload, uint16_t len)
{
	return append_op(p, code, slot, payload, NULL, len);
}

int kvw_op_image(kvw_page *p, const char *image_page)
{
	size_t len = kvop_image_size(image_page);
	return append_op(p, KVOP_INIT, 0, NULL, image_page, (uint16_t)len);
}

int kvw_op_special(kvw_page *p, const kv_special *s)
{
	return kvw_op(p, KVOP_SPECIAL, 0, s, sizeof(*s));
}

static void rb_register(void)
{
	for (int i = 0; i < W.nrb; i++) {
		rb_block *b = &W.rb[i];
		/* A rebuilt page needs no full-page image: an LSN after the redo
		 * point says so to the WAL (the record's end replaces it). */
		if (b->flags & WAL_BLK_WILL_INIT)
			page_set_lsn(b->p->page, wal_insert_lsn() + 1);
		buf_change_register(i, b->p->buf, b->flags);
		buf_change_data(i, b->ops, b->len);
	}
}

static wr_lsn insert_record(uint8_t info)
{
	buf_change_begin();
	rb_register();
	if (W.nrec == 0)
		info |= KV_FIRST;
	if ((info & KV_INFO_OP) == KV_INFO_COMMIT && W.ndrops > 0) {
		buf_change_main(W.drops, W.ndrops * sizeof(*W.drops));
		info |= KV_DROPS;
	}
	wr_lsn lsn = buf_change_insert(RM_KV, info);
	buf_change_end();
	W.nrb = 0;
	W.nrec++;
#ifdef WALRUS_TEST_HOOKS
	if (W.crash_after > 0 && W.nrec == W.crash_after) {
		wal_flush_to(lsn); /* the unfinished batch is durable: redo must drop it */
		_exit(KV_TEST_CRASH_EXIT);
	}
#endif
	return lsn;
}

int kvw_flush_record(void)
{
	if (W.nrb > 0)
		insert_record(KV_INFO_CHANGE | KV_MORE);
	return WALRUS_OK;
}

#ifdef WALRUS_TEST_HOOKS
void kv_test_crash_after_records(int n)
{
	W.crash_after = n;
}
#endif

/* ---------------------------------------------------------------- batch boundaries */

/* Loads the current tree's meta page into W.meta. */
static int load_meta(void)
{
	W.meta.nblocks = 1; /* enough to read the meta page */
	kvw_page *m;
	int rc = kvw_get(0, &m);
	if (rc != WALRUS_OK)
		return rc;
	W.meta = kvm_get(m->page);
	if (kvp_type(m->page) != KV_PT_META || W.meta.magic != KV_META_MAGIC ||
	    W.meta.height == 0 || W.meta.height > KV_MAX_HEIGHT)
		return wr_error(WALRUS_ECORRUPT, "block 0 of relation %u is not a valid meta page",
		                kv_cur_rel);
	W.meta0 = W.meta;
	/* A slot taken for the tree now starts with the root (kv_tree_claim). */
	kv_tree_sh *t = kv_tree_claim();
	if (atomic_load(&t->root_hint) == 0)
		atomic_store(&t->root_hint, kv_hint_make(W.meta.root, W.meta.height));
	return WALRUS_OK;
}

/* Makes room for one more tree in the batch and makes it current. */
static int add_tree(wr_relid rel)
{
	if (W.ntrees == W.tcap) {
		uint32_t cap = W.tcap ? W.tcap * 2 : 4;
		kvw_tree *t = realloc(W.trees, cap * sizeof(*t));
		if (t == NULL)
			return wr_error(WALRUS_ENOMEM, "out of memory for a batch's trees");
		W.trees = t;
		W.tcap = cap;
	}
	W.cur = W.ntrees++;
	W.trees[W.cur].rel = rel; /* its metas are saved when another tree comes */
	W.trees[W.cur].created = false;
	W.rel = kv_cur_rel = rel;
	return WALRUS_OK;
}

void kvw_batch_reset(void)
{
	/* Left over by a batch a PANIC interrupted: its buffers belonged to
	 * the shared memory of an instance that is gone. */
	for (uint32_t i = 0; i < W.n; i++)
		page_free(W.pages[i]);
	W.n = 0;
	W.nrb = 0;
	W.nrec = 0;
	W.ntrees = 0;
	W.splits = W.freed = W.reused = W.fastpath = W.hinted = W.shifts = 0;
	if (W.hcap)
		memset(W.hash, 0, W.hcap * sizeof(kvw_page *));
	W.rel = 0; /* no tree yet */
	W.ndrops = 0;
}

int kvw_tree_drop(wr_relid rel)
{
	if (wr_grow(&W.drops, &W.dcap, W.ndrops + 1, sizeof(*W.drops), 4) != WALRUS_OK)
		return wr_error(WALRUS_ENOMEM, "out of memory for a batch's drops");
	W.drops[W.ndrops++] = rel;
	return WALRUS_OK;
}

int kvw_batch_begin(void)
{
	wr_relid rel = kv_cur_rel;
	kvw_batch_reset();
	return kvw_tree_use(rel);
}

int kvw_tree_use(wr_relid rel)
{
	if (rel == W.rel) {
		kv_cur_rel = rel; /* a read of another tree may have moved it */
		return WALRUS_OK;
	}
	if (W.ntrees > 0) {
		W.trees[W.cur].meta = W.meta;
		W.trees[W.cur].meta0 = W.meta0;
	}
	for (uint32_t i = 0; i < W.ntrees; i++) {
		if (W.trees[i].rel == rel) {
			W.cur = i;
			W.rel = kv_cur_rel = rel;
			W.meta = W.trees[i].meta;
			W.meta0 = W.trees[i].meta0;
			return WALRUS_OK;
		}
	}
	int rc = add_tree(rel);
	return rc == WALRUS_OK ? load_meta() : rc;
}

int kvw_tree_create(wr_relid rel)
{
	if (W.ntrees > 0) {
		W.trees[W.cur].meta = W.meta;
		W.trees[W.cur].meta0 = W.meta0;
	}
	int rc = add_tree(rel);
	if (rc != WALRUS_OK)
		return rc;
	W.trees[W.cur].created = true;
	kv_tree_sh *t = kv_tree_claim();
	t->file_blocks = 0; /* the file is new: nothing of an earlier one counts */
	t->holes_known = false;
	t->rightmost_leaf = 0;
	atomic_store(&t->root_hint, 0); /* set at the commit: readers read the meta page */
	W.meta = (kv_meta){.magic = KV_META_MAGIC,
	                   .version = KV_META_VERSION,
	                   .root = 1,
	                   .height = 1,
	                   .nblocks = 0,
	                   .free_head = WR_INVALID_BLKNO,
	                   .next_value_id = 1};
	kvw_page *m, *root;
	char img[WR_PAGE_SIZE];
	kv_key inf = {.inf = true};
	rc = kvw_alloc(&m);
	if (rc == WALRUS_OK)
		rc = kvw_alloc(&root);
	if (rc == WALRUS_OK && (m->blk != 0 || root->blk != 1))
		rc = wr_error(WALRUS_EINTERNAL,
		              "a new tree in relation %u did not start at block 0", rel);
	if (rc != WALRUS_OK)
		return rc;
	kvn_init(img, 0, 0, WR_INVALID_BLKNO, WR_INVALID_BLKNO, &inf, &inf);
	rc = kvw_op_image(root, img);
	kvm_init(img, &W.meta);
	if (rc == WALRUS_OK)
		rc = kvw_op_image(m, img);
	W.meta0 = W.meta;
	return rc;
}

/* A backend's batch state goes with its handle (pages left by a PANIC included). */
void kvw_state_free(kv_write_state *ws)
{
	for (uint32_t i = 0; i < ws->n; i++)
		page_free(ws->pages[i]);
	for (uint32_t i = 0; i < ws->nspare; i++)
		page_free(ws->spare[i]);
	for (int i = 0; i < WAL_MAX_BLOCKS; i++)
		free(ws->rb[i].ops);
	free(ws->pages);
	free(ws->hash);
	free(ws->trees);
	free(ws->drops);
	memset(ws, 0, sizeof(*ws));
}

bool kvw_logged(void)
{
	return W.nrec > 0;
}

/* Unlocks and unpins everything, forgetting the batch's pages. */
static void release_all(void)
{
	for (uint32_t i = 0; i < W.n; i++) {
		kvw_page *p = W.pages[i];
		if (p->locked)
			buf_unlock(p->buf);
		buf_release(p->buf);
		page_done(p);
	}
	W.n = 0;
	W.nrb = 0;
	if (W.hcap)
		memset(W.hash, 0, W.hcap * sizeof(kvw_page *));
}

/* Each a locked add on a line every writer shares: only those that moved. */
static void add_counter(_Atomic uint64_t *c, uint64_t n)
{
	if (n > 0)
		atomic_fetch_add_explicit(c, n, memory_order_relaxed);
}

static void add_counters(void)
{
	add_counter(&kv_sh->splits, W.splits);
	add_counter(&kv_sh->pages_freed, W.freed);
	add_counter(&kv_sh->pages_reused, W.reused);
	add_counter(&kv_sh->fastpath_hits, W.fastpath);
	add_counter(&kv_sh->hint_hits, W.hinted);
	add_counter(&kv_sh->shifts, W.shifts);
}

/*
 * A batch of several records is atomic only once its last one is durable:
 * recovery drops the records of a batch that has no last one.  A page
 * stamped with the end of its own record could be written out once the WAL
 * was flushed that far, with the last record still in the WAL buffers, and
 * a power cut would then leave part of the batch on disk.  So every page
 * the batch changed carries the end of its last record: writing any of
 * them flushes the whole batch first.
 */
static void stamp_commit(wr_lsn end)
{
	for (uint32_t i = 0; i < W.n; i++) {
		kvw_page *p = W.pages[i];
		if (p->member && page_get_lsn(p->page) < end)
			page_set_lsn(p->page, end);
	}
}

/*
 * The current tree's meta page changes, if any.  Most batches (puts into
 * leaves that do not split) change only the key count: then 8 bytes say so
 * instead of the whole struct, a sixth of a small put's record.
 */
static int log_meta(void)
{
	kv_meta only_nkeys = W.meta0;
	only_nkeys.nkeys = W.meta.nkeys;
	if (memcmp(&W.meta, &W.meta0, sizeof(W.meta)) == 0)
		return WALRUS_OK;
	kvw_page *m;
	int rc = kvw_get(0, &m);
	if (rc != WALRUS_OK)
		return rc;
	if (memcmp(&W.meta, &only_nkeys, sizeof(W.meta)) == 0)
		return kvw_op(m, KVOP_NKEYS, 0, &W.meta.nkeys, sizeof(W.meta.nkeys));
	return kvw_op(m, KVOP_META, 0, &W.meta, sizeof(W.meta));
}

/* Every tree's meta page changes, the current tree's last (a batch of one
 * tree: its own, as before). */
static int log_metas(void)
{
	wr_relid last = W.rel;
	for (uint32_t i = 0; i < W.ntrees; i++) {
		if (W.trees[i].rel == last)
			continue;
		int rc = kvw_tree_use(W.trees[i].rel);
		if (rc == WALRUS_OK)
			rc = log_meta();
		if (rc != WALRUS_OK)
			return rc;
	}
	int rc = kvw_tree_use(last);
	return rc == WALRUS_OK ? log_meta() : rc;
}

/* Readers must find a tree's new root before they can see the pages. */
static void publish_roots(void)
{
	W.trees[W.cur].meta = W.meta;
	W.trees[W.cur].meta0 = W.meta0;
	for (uint32_t i = 0; i < W.ntrees; i++) {
		const kvw_tree *t = &W.trees[i];
		if (t->meta.root == t->meta0.root && t->meta.height == t->meta0.height &&
		    !t->created)
			continue;
		kv_cur_rel = t->rel;
		atomic_store(&kv_tree_claim()->root_hint,
		             kv_hint_make(t->meta.root, t->meta.height));
	}
	kv_cur_rel = W.rel;
}

/*
 * The last record of the batch carries the changes still being built and
 * the meta page: a batch of one small operation is one record.
 */
int kvw_commit(wr_lsn *lsn)
{
	*lsn = 0;
	int rc = W.ntrees > 1 ? log_metas() : log_meta();
	if (rc != WALRUS_OK)
		return rc; /* the caller aborts */
	if (W.nrec > 0 || W.nrb > 0 || W.ndrops > 0)
		*lsn = insert_record(KV_INFO_COMMIT);
	if (W.nrec > 1)
		stamp_commit(*lsn);
	if (W.ntrees > 1 || W.trees[0].created || W.meta.root != W.meta0.root ||
	    W.meta.height != W.meta0.height)
		publish_roots();
	add_counters();
	release_all();
	return WALRUS_OK;
}

void kvw_abort(void)
{
	W.nrb = 0;
	if (W.nrec > 0)
		insert_record(KV_INFO_ABORT);
	for (uint32_t i = 0; i < W.n; i++) {
		kvw_page *p = W.pages[i];
		if (p->lazy)
			undo_lazy(p->page, p);
		else if (p->pre != NULL)
			restore_used(p);
		else if (p->fresh)
			memset(p->page, 0, WR_PAGE_SIZE); /* unused again: as on disk */
	}
	/* The hints may name a page of the undone batch (past the restored end). */
	wr_relid cur = kv_cur_rel;
	for (uint32_t i = 0; i < W.ntrees; i++) {
		kv_cur_rel = W.trees[i].rel;
		kv_tree_sh *t = kv_tree_claim();
		t->rightmost_leaf = 0;
		if (W.trees[i].created) { /* its file is given up (kv_space.c) */
			atomic_store(&t->root_hint, 0);
			t->file_blocks = 0;
			t->holes_known = false;
		}
	}
	kv_cur_rel = cur;
	atomic_fetch_add(&kv_sh->aborts, 1);
	release_all();
}
