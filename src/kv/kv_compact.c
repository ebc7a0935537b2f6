/*
 * kv_compact.c - compaction: leaves packed, the tree moved to the front of
 * its data file, the tail of the file given back.
 *
 * A B+tree loaded in random order keeps its leaves about 85% full (shifts
 * before splits, kv_modify.c), and one whose keys were deleted keeps every
 * page it ever had.  Compaction runs in a backend as a sequence of small
 * write batches, each under the tree lock like any other (writers wait for
 * one batch at most, readers not at all), each atomic and logged:
 *
 *   1. pack: under each level-1 node, from left to right, a leaf takes its
 *      right sibling whole when that fits, else as many of its first entries
 *      as leave it a shift's slack (kvm_pack_pair).  Freed leaves go to the
 *      free list.
 *   2. move: with L pages in use, every node at block L or beyond moves to a
 *      free page below L (kvm_relocate), level by level from the root down,
 *      so a node's parent has moved before the node is looked for; then
 *      every overflow page at L or beyond, value by value in key order
 *      (kvm_ovf_move: the link to it, or the entry, follows it).
 *   3. cut: the free blocks at the end of the file leave the free list and
 *      the tree's end (meta.nblocks) comes down to the last page in use.
 *   4. give back (kv_compact_give_back, after a checkpoint has written the
 *      pages freed above): the blocks past the tree's end are punched out of
 *      the file.  A hole reads as an all-zero page, which a reader with a
 *      stale block number takes as "start over", where a shorter file would
 *      fail its read; the writer allocates the space again as the tree grows
 *      (kv_write.c, ensure_block).
 *
 * Interface: kv.h (kv_compact, kv_compact_give_back).
 */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "buffer/buffer.h"
#include "kv/kv_int.h"
#include "storage/storage.h"

/* Pairs of leaves one pack batch looks at: the tree lock is held for one batch. */
#define PACK_PAIRS_PER_BATCH 64
/* Nodes one move batch relocates at most. */
#define MOVES_PER_BATCH 512

/* A copy of block @blk, read under its share lock (the batch has not locked it). */
static int read_copy(wr_blkno blk, char *out)
{
	int buf;
	int rc = buf_read(kv_cur_rel, blk, &buf);
	if (rc != WALRUS_OK)
		return rc;
	buf_lock(buf, false);
	memcpy(out, buf_page(buf), WR_PAGE_SIZE);
	buf_unlock(buf);
	buf_release(buf);
	return WALRUS_OK;
}

/* The type and right link of block @blk, read under its share lock. */
static int read_link(wr_blkno blk, uint8_t *type, wr_blkno *right)
{
	int buf;
	int rc = buf_read(kv_cur_rel, blk, &buf);
	if (rc != WALRUS_OK)
		return rc;
	buf_lock(buf, false);
	*type = kvp_type(buf_page(buf));
	*right = kvp_special(buf_page(buf)).right;
	buf_unlock(buf);
	buf_release(buf);
	return WALRUS_OK;
}

/* ---------------------------------------------------------------- batches */

typedef int (*step_fn)(void *arg, bool *done);

#ifdef WALRUS_TEST_HOOKS
static int crash_after_batches; /* 0: off */
static void (*between_fn)(void *);
static void *between_arg;

void kv_test_compact_crash_after(int batches)
{
	crash_after_batches = batches;
}

void kv_test_compact_between(void (*fn)(void *), void *arg)
{
	between_fn = fn;
	between_arg = arg;
}

/* Between two batches, outside the tree lock: what another writer may do there. */
static void between_batches(void)
{
	wr_relid rel = kv_cur_rel; /* the hook's writes may move it */
	if (between_fn != NULL)
		between_fn(between_arg);
	kv_cur_rel = rel;
}

/* After the batch ending at @lsn: stop here as a crash would, that batch durable. */
static void crash_point(wr_lsn lsn)
{
	if (crash_after_batches > 0 && --crash_after_batches == 0) {
		wal_flush_to(lsn);
		_exit(KV_TEST_CRASH_EXIT);
	}
}
#else
static inline void crash_point(wr_lsn lsn)
{
	(void)lsn;
}

static inline void between_batches(void) {}
#endif

/* One step as one batch under the tree lock; *done when the step says so. */
static int run_batch(step_fn fn, void *arg, bool *done, kv_compact_result *r)
{
	wr_lsn lsn = 0;
	wr_relid rel = kv_cur_rel;
	rw_lock_excl(&kv_sh->tree_lock);
	/* A key space dropped between two batches: stop, nothing begun. */
	int rc = rel == KV_REL ? WALRUS_OK : kv_space_live(rel);
	kv_cur_rel = rel;
	bool begun = rc == WALRUS_OK;
	if (begun)
		rc = kvw_batch_begin();
	if (rc == WALRUS_OK)
		rc = fn(arg, done);
	if (rc == WALRUS_OK)
		rc = kvw_commit(&lsn);
	if (rc != WALRUS_OK && begun)
		kvw_abort();
	rw_unlock(&kv_sh->tree_lock);
	if (rc == WALRUS_OK && lsn != 0) {
		wal_flush_async(lsn);
		r->batches++;
		crash_point(lsn);
	}
	if (rc == WALRUS_OK)
		between_batches();
	return rc;
}

/* ---------------------------------------------------------------- 1. pack */

typedef struct pack_state {
	char key[KV_MAX_KEY]; /* where the next batch starts: a leaf's low fence */
	uint16_t kl;
	kv_compact_result *r;
} pack_state;

/* Remembers @leaf's low fence as where the next batch starts. */
static void pack_resume_at(pack_state *st, const char *leaf)
{
	kv_key low = kvn_low(leaf);
	st->kl = low.inf ? 0 : low.len;
	memcpy(st->key, low.p, st->kl);
}

/*
 * Brings the next leaves after slot @ps of @parent into the pool together
 * before the batch takes them one by one: a read stream over them, in
 * flight at once with io_method=io_uring, advised with sync; a sixteenth of
 * the pool at most, the stream closed before the batch pins anything more.
 * A hint: what it could not read is read by the batch as before.  Returns
 * how many leaves it covered: the pairs the batch takes before it is due
 * again (INT_MAX: never, the pool being too small).
 */
static int pack_read_ahead(const char *parent, int ps)
{
	wr_blkno blk[PACK_PAIRS_PER_BATCH + 1];
	int most = (int)WR_MIN((uint32_t)(PACK_PAIRS_PER_BATCH + 1), buf_nbuffers() / 16);
	int n = 0;
	for (int s = ps + 1; s < kvp_nslots(parent) && n < most; s++)
		blk[n++] = kvn_child(parent, s);
	buf_stream *s;
	if (most < 2)
		return INT_MAX;
	if (n == 0 || buf_stream_open_list(&s, kv_cur_rel, blk, (uint32_t)n, n) != WALRUS_OK) {
		wr_error_clear();
		return most;
	}
	buf_stream_wait(s);
	buf_stream_stats st;
	buf_stream_get_stats(s, &st);
	buf_stream_close(s);
	atomic_fetch_add_explicit(&kv_sh->scan_ahead, (uint64_t)n, memory_order_relaxed);
	atomic_fetch_add_explicit(&kv_sh->scan_ahead_io,
	                          st.io_method == WR_IO_URING ? st.blocks : st.submitted,
	                          memory_order_relaxed);
	return most;
}

static int pack_step(void *arg, bool *done)
{
	pack_state *st = arg;
	kvw_page *parent, *leaf;
	int ps;
	int rc = kvm_leaf_parent(st->key, st->kl, &parent, &ps, &leaf);
	if (rc != WALRUS_OK || parent == NULL) {
		*done = rc == WALRUS_OK;
		return rc;
	}
	/* Each pair takes one more leaf on the right (merged away, or passed). */
	int ahead_due = 0;
	for (int pairs = 0; rc == WALRUS_OK; pairs++) {
		if (pairs == ahead_due)
			ahead_due = pairs + pack_read_ahead(parent->page, ps);
		if (ps + 1 >= kvp_nslots(parent->page)) {
			kv_key high = kvn_high(parent->page);
			*done = high.inf;
			st->kl = high.inf ? 0 : high.len;
			memcpy(st->key, high.p, st->kl);
			/* Merges may leave a root with one child: a level less to descend. */
			return high.inf ? kvm_collapse_root() : WALRUS_OK;
		}
		if (pairs == PACK_PAIRS_PER_BATCH || (pairs > 0 && !kvw_pin_room(KV_PIN_RESERVE))) {
			rc = kvw_get(kvn_child(parent->page, ps), &leaf);
			if (rc == WALRUS_OK)
				pack_resume_at(st, leaf->page);
			return rc;
		}
		int res;
		rc = kvm_pack_pair(parent, ps, &res);
		if (res == KVM_PACK_MERGED)
			st->r->leaves_merged++;
		else
			ps++;
		st->r->leaves_poured += res == KVM_PACK_POURED;
	}
	return rc;
}

/* ---------------------------------------------------------------- the free list */

typedef struct free_list {
	wr_blkno *blk; /* in list order */
	uint32_t n;
} free_list;

/* Reads the free list (meta.nfree pages, linked through their right links). */
static int free_list_read(free_list *fl)
{
	const kv_meta *m = kvw_meta();
	fl->n = 0;
	fl->blk = malloc(((size_t)m->nfree + 1) * sizeof(wr_blkno));
	if (fl->blk == NULL)
		return wr_error(WALRUS_ENOMEM, "out of memory reading the free list");
	int rc = WALRUS_OK;
	for (wr_blkno b = m->free_head; rc == WALRUS_OK && b != WR_INVALID_BLKNO;) {
		if (fl->n == m->nfree || b >= m->nblocks || b == 0) {
			rc = wr_error(WALRUS_ECORRUPT,
			              "the free list of relation %u does not match its count of %u "
			              "pages (block %u)",
			              kv_cur_rel, m->nfree, b);
			break;
		}
		uint8_t t;
		rc = read_link(b, &t, &fl->blk[fl->n]);
		if (rc == WALRUS_OK && t != KV_PT_FREE && t != KV_PT_OVF)
			rc = wr_error(WALRUS_ECORRUPT,
			              "block %u of relation %u is on the free list but is not free",
			              b, kv_cur_rel);
		wr_blkno next = fl->blk[fl->n];
		fl->blk[fl->n++] = b;
		b = next;
	}
	if (rc == WALRUS_OK && fl->n != m->nfree)
		rc = wr_error(WALRUS_ECORRUPT,
		              "the free list of relation %u has %u pages, the meta page counts %u",
		              kv_cur_rel, fl->n, m->nfree);
	return rc;
}

/* Sets @blk's right link (the next free page) to @next. */
static int free_link(wr_blkno blk, wr_blkno next)
{
	kvw_page *p;
	int rc = kvw_get(blk, &p);
	if (rc != WALRUS_OK)
		return rc;
	kv_special s = kvp_special(p->page);
	s.right = next;
	return kvw_op_special(p, &s);
}

/*
 * Takes the pages @gone marks (by index into @fl) off the free list: the
 * head and each kept page whose next page changed are relinked.
 */
static int free_list_remove(const free_list *fl, const bool *gone)
{
	kv_meta *m = kvw_meta();
	wr_blkno prev = WR_INVALID_BLKNO;
	uint32_t removed = 0;
	bool prev_next_gone = false; /* the old next of prev was taken away */
	int rc = WALRUS_OK;
	for (uint32_t i = 0; rc == WALRUS_OK && i < fl->n; i++) {
		if (gone[i]) {
			removed++;
			if (prev == WR_INVALID_BLKNO)
				m->free_head = WR_INVALID_BLKNO;
			prev_next_gone = true;
			continue;
		}
		if (prev == WR_INVALID_BLKNO)
			m->free_head = fl->blk[i];
		else if (prev_next_gone)
			rc = free_link(prev, fl->blk[i]);
		prev = fl->blk[i];
		prev_next_gone = false;
	}
	if (rc == WALRUS_OK && prev != WR_INVALID_BLKNO && prev_next_gone)
		rc = free_link(prev, WR_INVALID_BLKNO);
	m->nfree -= removed;
	kv_sh->free_gen++;
	return rc;
}

/*
 * The free list as compaction last saw it, kept between its batches while
 * no other batch changed the list (kv_sh->free_gen): reading a list of a
 * million free pages for every batch of moves would take minutes.  With it,
 * the free pages below the end in ascending order, taken from the front.
 */
typedef struct free_cache {
	free_list fl;
	bool valid;
	uint64_t gen;     /* kv_sh->free_gen fl matches */
	wr_blkno low_end; /* the end low was made for (0: none) */
	wr_blkno *low;    /* free pages below low_end, ascending, from @next on */
	uint32_t nlow, next;
} free_cache;

static void free_cache_drop(free_cache *fc)
{
	free(fc->fl.blk);
	free(fc->low);
	*fc = (free_cache){.valid = false};
}

static int cmp_blk(const void *a, const void *b)
{
	wr_blkno x = *(const wr_blkno *)a, y = *(const wr_blkno *)b;
	return (x > y) - (x < y);
}

/* The list, read again unless the cached one is still the list. */
static int free_cache_get(free_cache *fc, kv_compact_result *r)
{
	if (fc->valid && fc->gen == kv_sh->free_gen)
		return WALRUS_OK;
	free_cache_drop(fc);
	int rc = free_list_read(&fc->fl);
	if (rc != WALRUS_OK)
		return rc;
	fc->valid = true;
	r->free_list_reads++;
	return WALRUS_OK;
}

/* Free pages below @end, ascending (made again when the end moved). */
static int free_cache_low(free_cache *fc, wr_blkno end)
{
	if (fc->low_end == end && fc->low != NULL)
		return WALRUS_OK;
	free(fc->low);
	fc->low = malloc(((size_t)fc->fl.n + 1) * sizeof(wr_blkno));
	if (fc->low == NULL)
		return wr_error(WALRUS_ENOMEM, "out of memory moving pages");
	fc->nlow = fc->next = 0;
	for (uint32_t i = 0; i < fc->fl.n; i++)
		if (fc->fl.blk[i] < end)
			fc->low[fc->nlow++] = fc->fl.blk[i];
	qsort(fc->low, fc->nlow, sizeof(*fc->low), cmp_blk);
	fc->low_end = end;
	return WALRUS_OK;
}

/* The lowest @n free pages below @end, taken off the free list into @dest. */
static int take_low_free(free_cache *fc, wr_blkno end, wr_blkno *dest, int n, kv_compact_result *r)
{
	int rc = free_cache_get(fc, r);
	if (rc == WALRUS_OK)
		rc = free_cache_low(fc, end);
	if (rc == WALRUS_OK && fc->nlow - fc->next < (uint32_t)n)
		rc = wr_error(
		    WALRUS_ECORRUPT,
		    "relation %u has %u pages in use but only %u free pages below block %u",
		    kv_cur_rel, end, fc->nlow - fc->next, end);
	bool *gone = rc == WALRUS_OK ? calloc(fc->fl.n + 1, sizeof(bool)) : NULL;
	if (rc == WALRUS_OK && gone == NULL)
		rc = wr_error(WALRUS_ENOMEM, "out of memory moving pages");
	if (rc != WALRUS_OK)
		return rc;
	memcpy(dest, fc->low + fc->next, (size_t)n * sizeof(wr_blkno));
	fc->next += (uint32_t)n;
	wr_blkno *taken = fc->low + fc->next - n; /* ascending: searchable */
	for (uint32_t i = 0; i < fc->fl.n; i++)
		gone[i] =
		    bsearch(&fc->fl.blk[i], taken, (size_t)n, sizeof(wr_blkno), cmp_blk) != NULL;
	rc = free_list_remove(&fc->fl, gone);
	uint32_t kept = 0;
	for (uint32_t i = 0; i < fc->fl.n; i++)
		if (!gone[i])
			fc->fl.blk[kept++] = fc->fl.blk[i];
	fc->fl.n = kept;
	free(gone);
	return rc;
}

/* The step freed @blk[0..n) in that order, each pushed on the list's head;
 * the cache follows, and is the list as this batch leaves it. */
static void free_cache_pushed(free_cache *fc, const wr_blkno *blk, int n)
{
	wr_blkno *grown =
	    realloc(fc->fl.blk, ((size_t)fc->fl.n + (size_t)n + 1) * sizeof(wr_blkno));
	if (grown == NULL) { /* read again next time */
		fc->valid = false;
		return;
	}
	fc->fl.blk = grown;
	memmove(fc->fl.blk + n, fc->fl.blk, fc->fl.n * sizeof(wr_blkno));
	for (int i = 0; i < n; i++)
		fc->fl.blk[n - 1 - i] = blk[i];
	fc->fl.n += (uint32_t)n;
	fc->gen = kv_sh->free_gen;
}

/* ---------------------------------------------------------------- 2. move */

typedef struct move_cand {
	wr_blkno parent; /* WR_INVALID_BLKNO: the root */
	int slot;
	wr_blkno blk;
} move_cand;

typedef struct move_state {
	int level; /* the level whose nodes move next */
	kv_compact_result *r;
	free_cache *fc;
	move_cand *cand; /* MOVES_PER_BATCH of each */
	wr_blkno *dest;
} move_state;

/* The leftmost node of @level (below the root's), read down the first children. */
static int leftmost(int level, wr_blkno *out, char *page)
{
	const kv_meta *m = kvw_meta();
	wr_blkno b = m->root;
	for (int l = (int)m->height - 1; l > level; l--) {
		int rc = read_copy(b, page);
		if (rc != WALRUS_OK)
			return rc;
		if (kvp_type(page) != KV_PT_NODE || kvp_special(page).level != l ||
		    kvn_nentries(page) == 0)
			return wr_error(WALRUS_ECORRUPT,
			                "block %u of relation %u is not a node of level %d", b,
			                kv_cur_rel, l);
		b = kvn_child(page, KV_FIRST_SLOT);
	}
	*out = b;
	return WALRUS_OK;
}

/* Up to @max nodes of @level at block @end or past it, with their parents' slots. */
static int move_candidates(int level, wr_blkno end, move_cand *c, int max, int *n)
{
	const kv_meta *m = kvw_meta();
	*n = 0;
	if (level == (int)m->height - 1) {
		if (m->root >= end)
			c[(*n)++] = (move_cand){.parent = WR_INVALID_BLKNO, .blk = m->root};
		return WALRUS_OK;
	}
	char *page = malloc(WR_PAGE_SIZE);
	if (page == NULL)
		return wr_error(WALRUS_ENOMEM, "out of memory looking for nodes to move");
	wr_blkno p = WR_INVALID_BLKNO;
	int rc = leftmost(level + 1, &p, page);
	for (uint32_t hops = 0; rc == WALRUS_OK && p != WR_INVALID_BLKNO && *n < max; hops++) {
		if (hops >= m->nblocks) {
			rc = wr_error(WALRUS_ECORRUPT,
			              "the right links of level %d of relation %u loop", level + 1,
			              kv_cur_rel);
			break;
		}
		rc = read_copy(p, page);
		if (rc == WALRUS_OK && (kvp_type(page) != KV_PT_NODE ||
		                        kvp_special(page).level != (uint16_t)(level + 1)))
			rc = wr_error(WALRUS_ECORRUPT,
			              "block %u of relation %u is not a node of level %d", p,
			              kv_cur_rel, level + 1);
		for (int s = KV_FIRST_SLOT; rc == WALRUS_OK && s < kvp_nslots(page) && *n < max;
		     s++) {
			wr_blkno child = kvn_child(page, s);
			if (child >= end)
				c[(*n)++] = (move_cand){.parent = p, .slot = s, .blk = child};
		}
		p = kvp_special(page).right;
	}
	free(page);
	return rc;
}

/* Moves candidate @c to free page @dest (off the free list already). */
static int move_one(const move_cand *c, int level, wr_blkno dest)
{
	kvw_page *parent = NULL, *x, *d;
	int rc = WALRUS_OK;
	if (c->parent != WR_INVALID_BLKNO) {
		rc = kvw_get(c->parent, &parent);
		if (rc == WALRUS_OK && kvn_child(parent->page, c->slot) != c->blk)
			rc = wr_error(
			    WALRUS_ECORRUPT,
			    "block %u of relation %u: downlink %d no longer names block %u",
			    c->parent, kv_cur_rel, c->slot, c->blk);
	}
	if (rc == WALRUS_OK)
		rc = kvw_get(c->blk, &x);
	if (rc == WALRUS_OK)
		rc = kvm_check_node(x, level);
	if (rc == WALRUS_OK)
		rc = kvw_get(dest, &d);
	return rc == WALRUS_OK ? kvm_relocate(parent, c->slot, x, d) : rc;
}

/* How many moves the batch's pins leave room for (up to @want; at least one,
 * so that a pool too small for any fails with the pin limit's error). */
static int moves_room(int want)
{
	/* each: the node, its new page, two neighbours, a free-list link; the parent */
	while (want > 1 && !kvw_pin_room(6 * (uint32_t)want + KV_PIN_RESERVE))
		want /= 2;
	return want;
}

static int move_step(void *arg, bool *done)
{
	move_state *st = arg;
	kv_meta *m = kvw_meta();
	wr_blkno end = m->nblocks - m->nfree; /* pages in use: they fit below */
	move_cand *c = st->cand;
	int n = 0, rc = WALRUS_OK;
	if (st->level > (int)m->height - 1) /* the root collapsed, or the tree shrank */
		st->level = (int)m->height - 1;
	while (rc == WALRUS_OK && st->level >= 0) {
		rc = move_candidates(st->level, end, c, moves_room(MOVES_PER_BATCH), &n);
		if (rc != WALRUS_OK || n > 0)
			break;
		st->level--;
	}
	if (rc != WALRUS_OK || n == 0) {
		*done = rc == WALRUS_OK;
		return rc;
	}
	wr_blkno *dest = st->dest;
	rc = take_low_free(st->fc, end, dest, n, st->r);
	for (int i = 0; rc == WALRUS_OK && i < n; i++) {
		rc = move_one(&c[i], st->level, dest[i]);
		st->r->pages_moved += rc == WALRUS_OK;
		dest[i] = c[i].blk; /* now the freed page, pushed on the list */
	}
	if (rc == WALRUS_OK)
		free_cache_pushed(st->fc, dest, n);
	return rc;
}

/* ---------------------------------------------------------------- 2b. overflow pages */

/* A page of an overflow chain to move: piece @seq at @blk, after @prev. */
typedef struct ovf_move {
	wr_blkno prev, blk;
	uint32_t seq;
} ovf_move;

typedef struct ovf_state {
	char key[KV_MAX_KEY]; /* the entries looked at next are this key and those after it */
	uint16_t kl;
	kv_compact_result *r;
	free_cache *fc;
	ovf_move *mv; /* MOVES_PER_BATCH of each */
	wr_blkno *dest;
} ovf_state;

static int not_node(wr_blkno b, int level)
{
	return wr_error(WALRUS_ECORRUPT, "block %u of relation %u is not a node of level %d", b,
	                kv_cur_rel, level);
}

/* A copy (in @page) of the leaf whose range holds @k, read down from the root. */
static int leaf_copy_for(const kv_key *k, char *page)
{
	const kv_meta *m = kvw_meta();
	wr_blkno b = m->root;
	for (int l = (int)m->height - 1;; l--) {
		int rc = read_copy(b, page);
		if (rc != WALRUS_OK)
			return rc;
		if (kvp_type(page) != KV_PT_NODE || kvp_special(page).level != l ||
		    (l > 0 && kvn_nentries(page) == 0))
			return not_node(b, l);
		if (l == 0)
			return WALRUS_OK;
		b = kvn_child(page, kvn_child_slot(page, k, false));
	}
}

/* The pages of @ref's chain at block @end or past it (up to @max of them). */
static int chain_tail(const kv_ovf_ref *ref, wr_blkno end, ovf_move *mv, int max, int *n,
                      char *page)
{
	uint32_t pieces = (ref->vlen + KV_OVF_CHUNK - 1) / KV_OVF_CHUNK;
	wr_blkno prev = WR_INVALID_BLKNO, b = ref->first;
	*n = 0;
	for (uint32_t seq = 0; seq < pieces && *n < max; seq++) {
		if (b == 0 || b >= kvw_meta()->nblocks)
			return wr_error(WALRUS_ECORRUPT,
			                "overflow value %llu of relation %u names block %u",
			                (unsigned long long)ref->id, kv_cur_rel, b);
		if (b >= end)
			mv[(*n)++] = (ovf_move){.prev = prev, .blk = b, .seq = seq};
		if (seq + 1 == pieces)
			break;
		int rc = read_copy(b, page);
		if (rc != WALRUS_OK)
			return rc;
		kv_ovf_hdr h = kvo_header(page);
		if (kvp_type(page) != KV_PT_OVF || h.id != ref->id || h.seq != seq)
			return wr_error(
			    WALRUS_ECORRUPT,
			    "block %u of relation %u is not piece %u of overflow value %llu", b,
			    kv_cur_rel, seq, (unsigned long long)ref->id);
		prev = b;
		b = kvp_special(page).right;
	}
	return WALRUS_OK;
}

/*
 * The first overflow value at or after the position with pages at @end or
 * past it: its key becomes the position, *n its pages to move (0: none left
 * in the tree).
 */
static int find_ovf_tail(ovf_state *st, wr_blkno end, ovf_move *mv, int max, int *n)
{
	char *leaf = malloc(2 * (size_t)WR_PAGE_SIZE), *page = leaf + WR_PAGE_SIZE;
	if (leaf == NULL)
		return wr_error(WALRUS_ENOMEM, "out of memory looking for overflow pages to move");
	kv_key pos = {.p = st->key, .len = st->kl};
	int rc = leaf_copy_for(&pos, leaf);
	bool eq;
	int s = rc == WALRUS_OK ? kvn_lower_bound(leaf, st->key, st->kl, &eq) : 0;
	*n = 0;
	for (uint32_t hops = 0; rc == WALRUS_OK && *n == 0; hops++) {
		for (; rc == WALRUS_OK && s < kvp_nslots(leaf) && *n == 0; s++) {
			uint16_t len;
			const char *it = kvp_item(leaf, s, &len);
			kv_leaf_ent e;
			if (!kvl_decode(it, len, &e))
				rc = wr_error(WALRUS_ECORRUPT,
				              "a leaf entry of relation %u is malformed",
				              kv_cur_rel);
			else if (e.kind == KV_OVERFLOW)
				rc = chain_tail(&e.ref, end, mv, max, n, page);
			if (rc == WALRUS_OK && *n > 0) {
				char buf[KV_MAX_KEY];
				kv_key whole = kvn_entry_key(leaf, s, buf);
				memcpy(st->key, whole.p, whole.len);
				st->kl = whole.len;
			}
		}
		wr_blkno right = kvp_special(leaf).right;
		if (rc != WALRUS_OK || *n > 0 || right == WR_INVALID_BLKNO)
			break;
		if (hops >= kvw_meta()->nblocks)
			rc = wr_error(WALRUS_ECORRUPT, "the leaves of relation %u link in a loop",
			              kv_cur_rel);
		if (rc == WALRUS_OK)
			rc = read_copy(right, leaf);
		if (rc == WALRUS_OK &&
		    (kvp_type(leaf) != KV_PT_NODE || kvp_special(leaf).level != 0))
			rc = not_node(right, 0);
		s = KV_FIRST_SLOT;
	}
	free(leaf);
	return rc;
}

static int ovf_step(void *arg, bool *done)
{
	ovf_state *st = arg;
	const kv_meta *m = kvw_meta();
	wr_blkno end = m->nblocks - m->nfree, *dest = st->dest;
	ovf_move *mv = st->mv;
	int n = 0;
	int rc = find_ovf_tail(st, end, mv, moves_room(MOVES_PER_BATCH), &n);
	if (rc != WALRUS_OK || n == 0) {
		*done = rc == WALRUS_OK;
		return rc;
	}
	rc = take_low_free(st->fc, end, dest, n, st->r);
	for (int i = 0; rc == WALRUS_OK && i < n; i++) {
		kvw_page *d;
		/* A piece moved just before this one is its new predecessor. */
		wr_blkno prev = i > 0 && mv[i - 1].seq + 1 == mv[i].seq ? dest[i - 1] : mv[i].prev;
		rc = kvw_get(dest[i], &d);
		if (rc == WALRUS_OK)
			rc = kvm_ovf_move(st->key, st->kl, prev, mv[i].blk, mv[i].seq, d);
		st->r->pages_moved += rc == WALRUS_OK;
	}
	for (int i = 0; rc == WALRUS_OK && i < n; i++)
		dest[i] = mv[i].blk; /* the freed pages, pushed on the list */
	if (rc == WALRUS_OK)
		free_cache_pushed(st->fc, dest, n);
	return rc;
}

/* ---------------------------------------------------------------- 3. cut */

typedef struct cut_state {
	free_cache *fc; /* the moves' copy of the list, used if still valid */
	kv_compact_result *r;
} cut_state;

static int cut_step(void *arg, bool *done)
{
	cut_state *st = arg;
	*done = true;
	kv_meta *m = kvw_meta();
	int rc = free_cache_get(st->fc, st->r);
	if (rc != WALRUS_OK)
		return rc;
	const free_list fl = st->fc->fl;
	bool *is_free = calloc(m->nblocks, sizeof(bool)), *gone = calloc(fl.n + 1, sizeof(bool));
	if (rc == WALRUS_OK && (is_free == NULL || gone == NULL))
		rc = wr_error(WALRUS_ENOMEM, "out of memory cutting the tree's end");
	for (uint32_t i = 0; rc == WALRUS_OK && i < fl.n; i++)
		is_free[fl.blk[i]] = true;
	wr_blkno cut = m->nblocks;
	while (rc == WALRUS_OK && cut > 1 && is_free[cut - 1])
		cut--;
	uint32_t writes = 0;
	for (uint32_t i = 0; rc == WALRUS_OK && i < fl.n; i++) {
		gone[i] = fl.blk[i] >= cut;
		writes += i > 0 && gone[i] && !gone[i - 1];
	}
	/* Each kept page whose next page goes is relinked: pinned to the batch's end. */
	if (rc == WALRUS_OK && cut < m->nblocks && kvw_pin_room(writes + KV_PIN_RESERVE)) {
		rc = free_list_remove(&fl, gone);
		m->nblocks = cut;
	} else if (rc == WALRUS_OK && cut < m->nblocks) {
		wr_log(WR_WARNING,
		       "compaction: the end of relation %u stays at block %u: unlinking %u free "
		       "pages needs more pins than a batch may hold (raise shared_buffers)",
		       kv_cur_rel, m->nblocks, m->nblocks - cut);
	}
	free(is_free);
	free(gone);
	return rc;
}

/* ---------------------------------------------------------------- the whole */

int kv_compact(kv_compact_result *r)
{
	return kv_compact_in(KV_REL, r);
}

int kv_compact_give_back(uint64_t *blocks)
{
	return kv_compact_give_back_in(KV_REL, blocks);
}

int kv_compact_in(wr_relid rel, kv_compact_result *r)
{
	kv_cur_rel = rel;
	memset(r, 0, sizeof(*r));
	bool done = false;
	rw_lock_shared(&kv_sh->tree_lock);
	kv_meta m0;
	int rc = kv_read_meta(&m0);
	rw_unlock(&kv_sh->tree_lock);
	if (rc != WALRUS_OK)
		return rc;
	r->blocks_before = m0.nblocks;
	uint64_t t0 = wr_now_ns();
	pack_state ps = {.kl = 0, .r = r};
	while (rc == WALRUS_OK && !done)
		rc = run_batch(pack_step, &ps, &done, r);
	/* Progress in the log: a large tree takes seconds per phase. */
	if (rc == WALRUS_OK)
		wr_log(WR_LOG, "compaction: leaves packed (%llu merged, %llu poured) in %.3f s",
		       (unsigned long long)r->leaves_merged, (unsigned long long)r->leaves_poured,
		       (double)(wr_now_ns() - t0) / 1e9);
	t0 = wr_now_ns();
	free_cache fc = {.valid = false};
	move_state ms = {.level = (int)m0.height - 1,
	                 .r = r,
	                 .fc = &fc,
	                 .cand = malloc(MOVES_PER_BATCH * sizeof(move_cand)),
	                 .dest = malloc(MOVES_PER_BATCH * sizeof(wr_blkno))};
	ovf_state os = {.kl = 0,
	                .r = r,
	                .fc = &fc,
	                .mv = malloc(MOVES_PER_BATCH * sizeof(ovf_move)),
	                .dest = ms.dest};
	if (rc == WALRUS_OK && (ms.cand == NULL || ms.dest == NULL || os.mv == NULL))
		rc = wr_error(WALRUS_ENOMEM, "out of memory compacting");
	for (done = false; rc == WALRUS_OK && !done;)
		rc = run_batch(move_step, &ms, &done, r);
	for (done = false; rc == WALRUS_OK && !done;)
		rc = run_batch(ovf_step, &os, &done, r);
	free(ms.cand);
	free(ms.dest);
	free(os.mv);
	if (rc == WALRUS_OK)
		wr_log(WR_LOG, "compaction: %llu pages moved to the front in %.3f s",
		       (unsigned long long)r->pages_moved, (double)(wr_now_ns() - t0) / 1e9);
	cut_state cs = {.fc = &fc, .r = r};
	if (rc == WALRUS_OK)
		rc = run_batch(cut_step, &cs, &done, r);
	free_cache_drop(&fc);
	kv_meta m1;
	rw_lock_shared(&kv_sh->tree_lock);
	if (rc == WALRUS_OK)
		rc = kv_read_meta(&m1);
	rw_unlock(&kv_sh->tree_lock);
	if (rc == WALRUS_OK) {
		r->blocks_after = m1.nblocks;
		atomic_fetch_add(&kv_sh->compactions, 1);
		atomic_fetch_add(&kv_sh->compact_merged, r->leaves_merged);
		atomic_fetch_add(&kv_sh->compact_moved, r->pages_moved);
	}
	return rc;
}

int kv_compact_give_back_in(wr_relid tree, uint64_t *blocks)
{
	smgr_rel *rel;
	wr_blkno nfile;
	kv_meta m;
	*blocks = 0;
	rw_lock_excl(&kv_sh->tree_lock);
	int rc = tree == KV_REL ? WALRUS_OK : kv_space_live(tree);
	kv_cur_rel = tree;
	if (rc == WALRUS_OK)
		rc = kv_read_meta(&m);
	if (rc == WALRUS_OK)
		rc = smgr_open(kv_cur_rel, &rel);
	if (rc == WALRUS_OK)
		rc = smgr_nblocks(rel, &nfile);
	if (rc == WALRUS_OK && nfile > m.nblocks) {
		rc = smgr_punch(rel, m.nblocks, nfile - m.nblocks);
		if (rc != WALRUS_OK && errno == EOPNOTSUPP) {
			wr_log(WR_WARNING, "compaction: %s; the space stays with the file",
			       walrus_errmsg());
			wr_error_clear();
			rw_unlock(&kv_sh->tree_lock);
			return WALRUS_OK;
		}
	}
	if (rc == WALRUS_OK && nfile > m.nblocks) {
		*blocks = nfile - m.nblocks;
		atomic_fetch_add(&kv_sh->compact_given_back, *blocks);
		/* The writer allocates these again before it uses them (ensure_block). */
		kv_tree_sh *t = kv_tree_claim();
		t->file_blocks = m.nblocks;
		t->holes_known = t->holes = true;
	}
	rw_unlock(&kv_sh->tree_lock);
	return rc;
}
