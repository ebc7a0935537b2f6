/*
 * kv_iter.c - ordered iterators over a key range.
 *
 * An iterator copies the leaf it is on (under the leaf's shared lock, held
 * for the copy only) and walks the copy.  Leaving the copy forward, it
 * continues at the node whose low fence is the copy's high fence: the right
 * sibling if it still starts there, otherwise the leaf a fresh descent finds
 * for that fence.  Since fences partition the keys at every instant, every
 * key that existed from the copy until now lies either in the copy or at or
 * past its high fence, so none is skipped or returned twice.  Backward, it
 * descends for the keys just below the copy's low fence.
 *
 * An overflow value is read when the iterator lands on its entry.  If its
 * chain was freed meanwhile (the key was replaced or deleted), the iterator
 * looks the key up again: it returns the newer value, or, if the key is
 * gone, moves on in the same direction.
 *
 * Look-ahead.  A scan whose leaves come from storage (AHEAD_AFTER leaves
 * crossed, the last two each taking AHEAD_SLOW_NS or more to reach: a
 * short scan, or one served by the pool or the page cache, pays two clock
 * reads per leaf) plans the leaves to come from the level-1 node above
 * them (kv_plan_leaves: its downlinks from the next leaf on, then the next
 * node's) and hands the next of them to a read stream, a window at a time:
 * with io_method=io_uring their reads are in flight together and land in
 * the pool, with sync the kernel is advised to read them.  The window
 * starts at AHEAD_FIRST leaves and doubles at each batch up to AHEAD_MAX
 * (and a sixteenth of the pool); a new batch goes out when half the window
 * is left.  The look-ahead stops when it stops paying: with io_uring after
 * two batches in a row whose reads had all completed when waited for (the
 * page cache had them); with sync, whose advice says nothing back, after
 * AHEAD_PROBE batches, and slow leaves past what was advised start it
 * again.  With sync and O_DIRECT data files there is nothing to advise.
 *
 * The plan is a hint and nothing else: the next leaf is still the one the
 * right link and the fences (or a descent) decide, found in the pool or
 * read as before.  Each leaf reached is looked for in the plan; entries
 * before it are passed over (merged or moved away), and a plan that names
 * none of AHEAD_MISSES leaves in a row is dropped and made again from the
 * current leaf.  A leaf that split meanwhile only costs a miss.
 *
 * An iterator holds no pin and no read between calls: each stream is
 * closed before the move that opened it returns, its reads completed
 * (io_uring) and its pins released, so the pages wait in the pool, not
 * pinned.  Holding them across calls is not safe: a read in flight keeps
 * its buffer's I/O flag, which every other backend wanting that leaf waits
 * for, and only this backend's ring can end it, at its next call, which
 * may never come; and pins are waited for by buf_drop_rel when a key space
 * is dropped (a drop waits for the calls inside the space, not for an
 * iterator between calls).  What stays between calls is the plan (block
 * numbers) and what is issued of it.
 *
 * Interface: kv.h (kv_iter_*).
 */
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "buffer/buffer.h"
#include "kv/kv_int.h"
#include "storage/storage.h"

#define ITER_MAX_RETRIES 100000

#define AHEAD_AFTER   2     /* leaves a scan crosses before it looks ahead */
#define AHEAD_SLOW_NS 30000 /* a leaf slower to reach came from storage */
#define AHEAD_FIRST   8     /* the first window, in leaves */
#define AHEAD_MAX     32    /* the largest window */
#define AHEAD_PLAN    64    /* leaves planned at most */
#define AHEAD_MISSES  3     /* leaves in a row off the plan before it is dropped */
#define AHEAD_PROBE   8     /* sync: batches before the look-ahead checks it still pays */

enum { FWD, BACK };

typedef struct iter_ahead {
	wr_blkno blk[AHEAD_PLAN]; /* the leaves to come, in scan order: blk[pos .. n) */
	int pos, n;
	int issued;        /* blk[pos .. issued) were handed to a read stream */
	int dir;           /* of the plan */
	int crossed;       /* leaves crossed in that direction since the last seek */
	int window;        /* leaves to keep issued ahead; 0: the pool is too small */
	int misses;        /* leaves in a row the plan did not name */
	int slow;          /* leaves in a row slow to reach */
	int quiet;         /* batches since the look-ahead last showed it pays */
	bool on;           /* looking ahead */
	kv_leaf_plan cont; /* more, next: where the leaves after blk[n - 1] start */
} iter_ahead;

struct kv_iter {
	wr_relid rel; /* the tree: every move makes it current */
	char lo[KV_MAX_KEY], hi[KV_MAX_KEY];
	uint16_t lol, hil;
	bool has_lo, has_hi;
	char leaf[WR_PAGE_SIZE]; /* copy of the current leaf */
	int pos;                 /* entry slot in the copy */
	int nslots;              /* of the copy */
	/* key: in the copy, or in kbuf after the copy's prefix (valid only);
	 * val: in the copy, or vbuf */
	kv_iter_cur cur;
	char kbuf[KV_MAX_KEY + 16]; /* + 16: whole_key's fixed-size copy */
	uint16_t kpfx;              /* the copy's prefix, at the start of kbuf */
	char *vbuf;
	size_t vcap;
	iter_ahead ahead;
};

/* ---------------------------------------------------------------- leaves */

/*
 * Copies a leaf held share-locked: the header and line pointers, and the
 * items and special space, skipping the free hole between them, which no
 * reader of the copy looks at (a damaged line pointer into the hole reads
 * stale bytes of this copy, never outside it: kvp_item).  A leaf after
 * random inserts is about a third empty: cache misses a scan need not take.
 */
static void copy_leaf(kv_iter *it, const char *page)
{
	wr_page_header h = kvp_header(page);
	if (!kvp_sane_header(page)) {
		memcpy(it->leaf, page, WR_PAGE_SIZE);
	} else {
		memcpy(it->leaf, page, h.lower);
		memcpy(it->leaf + h.upper, page + h.upper, WR_PAGE_SIZE - (size_t)h.upper);
	}
	kv_key p = kvn_prefix(it->leaf);
	memcpy(it->kbuf, p.p, p.len);
	it->kpfx = p.len;
}

/*
 * The whole key of an entry of the copy whose stored key is @k: @k itself,
 * or after the copy's prefix in kbuf.  A short tail is copied as 16 bytes
 * (two moves, not a call): @k lies in the copy's items, which end 16 bytes
 * before the copy does (the special space), so the read stays in the copy.
 */
static kv_key whole_key(kv_iter *it, const char *k, uint16_t kl)
{
	if (it->kpfx == 0)
		return (kv_key){.p = k, .len = kl};
	if (kl > KV_MAX_KEY - it->kpfx) /* a damaged entry; kvn_entries_sane refuses it */
		kl = (uint16_t)(KV_MAX_KEY - it->kpfx);
	if (kl <= 16 && k + 16 <= it->leaf + WR_PAGE_SIZE)
		memcpy(it->kbuf + it->kpfx, k, 16);
	else
		memcpy(it->kbuf + it->kpfx, k, kl);
	return (kv_key){.p = it->kbuf, .len = (uint16_t)(it->kpfx + kl)};
}

/* Copies the leaf a descent for @k finds; *@blk (unless NULL) is its block. */
static int load_leaf(kv_iter *it, const kv_key *k, int mode, wr_blkno *blk)
{
	kv_rpage p;
	int rc = kv_descend(k, mode, &p);
	if (rc != WALRUS_OK)
		return rc;
	copy_leaf(it, p.page);
	if (blk != NULL)
		*blk = p.blk;
	kv_rpage_done(&p);
	return WALRUS_OK;
}

/* ---------------------------------------------------------------- look-ahead */

#ifdef WALRUS_TEST_HOOKS
static _Atomic bool ahead_always;

void kv_test_iter_ahead_always(bool on)
{
	atomic_store(&ahead_always, on);
}
#define AHEAD_ALWAYS() atomic_load_explicit(&ahead_always, memory_order_relaxed)
#else
#define AHEAD_ALWAYS() false
#endif

static void ahead_reset(iter_ahead *a, int dir)
{
	a->pos = a->n = a->issued = 0;
	a->crossed = a->misses = a->slow = a->quiet = 0;
	a->on = false;
	a->dir = dir;
	a->cont.more = false;
	/* Pinned ahead, a window must leave the pool to everyone else. */
	int most = (int)WR_MIN((uint32_t)AHEAD_MAX, buf_nbuffers() / 16);
	a->window = most >= 2 ? WR_MIN(AHEAD_FIRST, most) : 0;
}

/* Adds to the plan the leaves from @from on (in the plan's direction). */
static void ahead_plan(kv_iter *it, const kv_key *from)
{
	iter_ahead *a = &it->ahead;
	if (a->pos > 0) {
		memmove(a->blk, a->blk + a->pos, sizeof(a->blk[0]) * (size_t)(a->n - a->pos));
		a->n -= a->pos;
		a->issued = WR_MAX(a->issued - a->pos, 0);
		a->pos = 0;
	}
	if (a->n == AHEAD_PLAN)
		return;
	char k[KV_MAX_KEY];
	kv_key key = *from;
	if (!key.inf) {
		memcpy(k, from->p, from->len);
		key.p = k;
	}
	kv_key until = a->dir == FWD ? (kv_key){.p = it->hi, .len = it->hil}
	                             : (kv_key){.p = it->lo, .len = it->lol};
	a->cont.blk = a->blk + a->n;
	a->cont.cap = AHEAD_PLAN - a->n;
	a->cont.until = (a->dir == FWD ? it->has_hi : it->has_lo) ? &until : NULL;
	if (kv_plan_leaves(&key, a->dir == FWD ? KV_SEEK_GE : KV_SEEK_LT, &a->cont) != WALRUS_OK) {
		/* Only a hint: the move itself reads what it needs and reports its errors. */
		wr_error_clear();
		a->cont.more = false;
		return;
	}
	a->n += a->cont.n;
}

/* Hands the next leaves of the plan to a read stream when half the window is left. */
static void ahead_issue(kv_iter *it)
{
	iter_ahead *a = &it->ahead;
	a->issued = WR_MAX(a->issued, a->pos);
	int end = WR_MIN(a->n, a->pos + a->window);
	if (a->issued >= end || a->issued - a->pos > a->window / 2)
		return;
	buf_stream *s;
	int n = end - a->issued;
	if (buf_stream_open_list(&s, it->rel, a->blk + a->issued, (uint32_t)n, n) != WALRUS_OK) {
		wr_error_clear();
		return;
	}
	buf_stream_wait(s);
	buf_stream_stats st;
	buf_stream_get_stats(s, &st);
	buf_stream_close(s); /* the reads done and the pins released: nothing held past the call */
	bool uring = st.io_method == WR_IO_URING;
	atomic_fetch_add_explicit(&kv_sh->scan_ahead, (uint64_t)n, memory_order_relaxed);
	atomic_fetch_add_explicit(&kv_sh->scan_ahead_io, uring ? st.blocks : st.submitted,
	                          memory_order_relaxed);
	a->issued = end;
	a->window =
	    (int)WR_MIN((uint32_t)a->window * 2, WR_MIN((uint32_t)AHEAD_MAX, buf_nbuffers() / 16));
	if (!uring && smgr_direct()) {
		a->window = 0; /* advice is skipped for O_DIRECT files: nothing to gain */
		a->on = false;
	}
	a->quiet = uring && st.waits > 0 ? 0 : a->quiet + 1;
	if (a->quiet >= (uring ? 2 : AHEAD_PROBE) && !AHEAD_ALWAYS())
		a->on = false;
}

/*
 * Before the iterator leaves its copy in direction @dir, past @edge (the
 * copy's high fence forward, its low fence backward): plans and issues.
 */
static void ahead_step(kv_iter *it, int dir, const kv_key *edge)
{
	iter_ahead *a = &it->ahead;
	if (a->dir != dir)
		ahead_reset(a, dir);
	a->crossed++;
	if (!a->on)
		return;
	if (a->pos >= a->n) {
		a->pos = a->n = a->issued = 0;
		ahead_plan(it, edge);
	} else if (a->cont.more && a->n - a->pos < AHEAD_MAX) {
		kv_key next = {.p = a->cont.next, .len = a->cont.next_len};
		ahead_plan(it, &next);
	}
	ahead_issue(it);
}

/*
 * The iterator moved on to leaf @blk, which took @ns to reach: the plan's
 * next entries follow it, and two slow leaves in a row (one could be a
 * preemption) start the look-ahead.
 */
static void ahead_landed(kv_iter *it, wr_blkno blk, uint64_t ns)
{
	iter_ahead *a = &it->ahead;
	a->slow = ns >= AHEAD_SLOW_NS || AHEAD_ALWAYS() ? a->slow + 1 : 0;
	if (!a->on && a->slow >= 2 && a->crossed >= AHEAD_AFTER && a->window > 0) {
		a->on = true;
		a->quiet = 0;
	}
	if (a->pos >= a->n)
		return;
	for (int i = a->pos; i < a->n; i++)
		if (a->blk[i] == blk) {
			a->pos = i + 1;
			a->misses = 0;
			return;
		}
	if (++a->misses >= AHEAD_MISSES) {
		a->pos = a->n = a->issued = a->misses = 0;
		a->cont.more = false;
	}
}

static bool same_key(const kv_key *a, const kv_key *b)
{
	return a->inf == b->inf && (a->inf || kv_cmp(a->p, a->len, b->p, b->len) == 0);
}

/* The right sibling, if it still starts at @high: copies it and sets *done, *blk. */
static int try_right(kv_iter *it, const kv_key *high, bool *done, wr_blkno *blk)
{
	int buf;
	*done = false;
	wr_blkno right = *blk = kvp_special(it->leaf).right;
	if (right == WR_INVALID_BLKNO)
		return WALRUS_OK;
	int rc = buf_read(kv_cur_rel, right, &buf);
	if (rc != WALRUS_OK)
		return rc;
	buf_lock(buf, false);
	const char *page = buf_page(buf);
	if (kvp_type(page) == KV_PT_NODE && kvp_sane_header(page) &&
	    kvp_nslots(page) >= KV_FIRST_SLOT && kvp_special(page).level == 0) {
		kv_key low = kvn_low(page);
		if (same_key(&low, high)) {
			copy_leaf(it, page);
			*done = true;
		}
	}
	buf_unlock(buf);
	buf_release(buf);
	return WALRUS_OK;
}

/* Moves to the leaf holding the keys at and after the copy's high fence. */
static int next_leaf(kv_iter *it)
{
	char hk[KV_MAX_KEY];
	kv_key high = kvn_high(it->leaf);
	memcpy(hk, high.p, high.len);
	high.p = hk;
	bool done;
	wr_blkno blk;
	ahead_step(it, FWD, &high);
	uint64_t t0 = wr_now_ns();
	int rc = try_right(it, &high, &done, &blk);
	if (rc == WALRUS_OK && !done)
		rc = load_leaf(it, &high, KV_SEEK_GE, &blk);
	if (rc == WALRUS_OK) {
		bool eq;
		ahead_landed(it, blk, wr_now_ns() - t0);
		it->pos = kvn_lower_bound(it->leaf, high.p, high.len, &eq);
	}
	return rc;
}

/* Moves to the leaf holding the keys just below the copy's low fence. */
static int prev_leaf(kv_iter *it)
{
	char lk[KV_MAX_KEY];
	kv_key low = kvn_low(it->leaf);
	memcpy(lk, low.p, low.len);
	low.p = lk;
	wr_blkno blk;
	ahead_step(it, BACK, &low);
	uint64_t t0 = wr_now_ns();
	int rc = load_leaf(it, &low, KV_SEEK_LT, &blk);
	if (rc == WALRUS_OK) {
		bool eq;
		ahead_landed(it, blk, wr_now_ns() - t0);
		it->pos = kvn_lower_bound(it->leaf, low.p, low.len, &eq) - 1;
	}
	return rc;
}

/* ---------------------------------------------------------------- positioning */

/* The whole key of stored key @k (after the copy's prefix) against @b. */
static int cmp_whole(const kv_iter *it, const char *k, uint16_t kl, const char *b, uint16_t bl)
{
	uint16_t p = it->kpfx;
	int c = memcmp(it->kbuf, b, p < bl ? p : bl);
	if (c != 0)
		return c;
	if (bl < p) /* b is a proper prefix of the key's prefix */
		return 1;
	return kv_cmp(k, kl, b + p, (size_t)(bl - p));
}

/* Assembled in kbuf when the copy has a prefix: valid until the next move. */
static kv_key cur_key(kv_iter *it)
{
	kv_key k = kvn_leaf_key(it->leaf, it->pos);
	return whole_key(it, k.p, k.len);
}

static bool out_of_range(kv_iter *it, int dir)
{
	kv_key k = cur_key(it);
	if (dir == FWD)
		return it->has_hi && kv_cmp(k.p, k.len, it->hi, it->hil) >= 0;
	return it->has_lo && kv_cmp(k.p, k.len, it->lo, it->lol) < 0;
}

/* The value of the current entry; KV_RETRY when its overflow chain changed. */
static int load_value(kv_iter *it)
{
	uint16_t len;
	kv_leaf_ent e;
	const char *item = kvp_item(it->leaf, it->pos, &len);
	if (!kvl_decode(item, len, &e))
		return wr_error(WALRUS_ECORRUPT, "bad leaf entry in a leaf of relation %u",
		                kv_cur_rel);
	if (e.kind == KV_INLINE) {
		it->cur.val = e.val;
		it->cur.vlen = e.vlen;
		return WALRUS_OK;
	}
	if (e.vlen > it->vcap) {
		char *b = realloc(it->vbuf, e.vlen);
		if (b == NULL)
			return wr_error(WALRUS_ENOMEM, "out of memory for a value of %u bytes",
			                e.vlen);
		it->vbuf = b;
		it->vcap = e.vlen;
	}
	it->cur.val = it->vbuf;
	it->cur.vlen = e.vlen;
	return kv_ovf_read(&e.ref, it->vbuf);
}

/* From it->pos, the first entry in direction @dir (crossing leaves) within the range. */
static int settle_once(kv_iter *it, int dir)
{
	for (;;) {
		int n = kvp_nslots(it->leaf);
		it->nslots = n;
		if (it->pos >= KV_FIRST_SLOT && it->pos < n) {
			if (out_of_range(it, dir))
				return WALRUS_OK;
			kv_key k = cur_key(it);
			it->cur.key = k.p;
			it->cur.klen = k.len;
			it->cur.valid = true;
			return load_value(it);
		}
		kv_key edge = dir == FWD ? kvn_high(it->leaf) : kvn_low(it->leaf);
		if (edge.inf)
			return WALRUS_OK;
		int rc = dir == FWD ? next_leaf(it) : prev_leaf(it);
		if (rc != WALRUS_OK)
			return rc;
	}
}

/* Finds the current key again after its value changed under us. */
static int relocate(kv_iter *it, int dir)
{
	char k[KV_MAX_KEY];
	kv_key key = cur_key(it);
	memcpy(k, key.p, key.len);
	key.p = k;
	int rc = load_leaf(it, &key, KV_SEEK_GE, NULL);
	if (rc == WALRUS_OK) {
		bool eq;
		it->pos = kvn_lower_bound(it->leaf, key.p, key.len, &eq);
		if (!eq && dir == BACK)
			it->pos--;
	}
	return rc;
}

static int settle(kv_iter *it, int dir)
{
	for (int tries = 0; tries < ITER_MAX_RETRIES; tries++) {
		it->cur.valid = false;
		int rc = settle_once(it, dir);
		if (rc != KV_RETRY) {
			if (rc != WALRUS_OK)
				it->cur.valid = false;
			return rc;
		}
		if (tries >= 8)
			sched_yield();
		rc = relocate(it, dir);
		if (rc != WALRUS_OK)
			return rc;
	}
	it->cur.valid = false;
	return wr_error(WALRUS_ECORRUPT, "an overflow value never matched its leaf entry: the "
	                                 "tree is damaged (run verify)");
}

/* ---------------------------------------------------------------- interface */

static int set_bound(char *dst, uint16_t *len, bool *has, const void *k, size_t kl)
{
	*has = k != NULL;
	if (k == NULL)
		return WALRUS_OK;
	if (kl > KV_MAX_KEY)
		return wr_error(WALRUS_ETOOBIG, "range bound of %zu bytes is over the limit of %u",
		                kl, KV_MAX_KEY);
	if (kl > 0)
		memcpy(dst, k, kl);
	*len = (uint16_t)kl;
	return WALRUS_OK;
}

int kv_iter_open(const void *lo, size_t lol, const void *hi, size_t hil, kv_iter **out)
{
	return kv_iter_open_in(KV_REL, lo, lol, hi, hil, out);
}

int kv_iter_open_in(wr_relid rel, const void *lo, size_t lol, const void *hi, size_t hil,
                    kv_iter **out)
{
	/* *out holds it from the start: a PANIC in the seek unwinds past this
	 * frame (longjmp), and the caller's cleanup must still find it. */
	kv_iter *it = *out = calloc(1, sizeof(*it));
	if (it == NULL)
		return wr_error(WALRUS_ENOMEM, "out of memory for an iterator");
	it->rel = rel;
	int rc = set_bound(it->lo, &it->lol, &it->has_lo, lo, lol);
	if (rc == WALRUS_OK)
		rc = set_bound(it->hi, &it->hil, &it->has_hi, hi, hil);
	if (rc == WALRUS_OK)
		rc = kv_iter_seek(it, NULL, 0);
	if (rc != WALRUS_OK) {
		kv_iter_close(it);
		*out = NULL;
	}
	return rc;
}

int kv_iter_seek(kv_iter *it, const void *k, size_t kl)
{
	kv_key key = {.inf = true};
	if (k != NULL && kl > KV_MAX_KEY)
		return wr_error(WALRUS_ETOOBIG, "seek key of %zu bytes is over the limit of %u", kl,
		                KV_MAX_KEY);
	kv_cur_rel = it->rel;
	if (it->has_lo && (k == NULL || kv_cmp(k, kl, it->lo, it->lol) < 0)) {
		k = it->lo;
		kl = it->lol;
	}
	if (k != NULL && kl > 0)
		key = (kv_key){.p = k, .len = (uint16_t)kl};
	it->cur.valid = false;
	ahead_reset(&it->ahead, FWD);
	int rc = load_leaf(it, &key, KV_SEEK_GE, NULL);
	if (rc != WALRUS_OK)
		return rc;
	bool eq;
	it->pos = key.inf ? KV_FIRST_SLOT : kvn_lower_bound(it->leaf, key.p, key.len, &eq);
	return settle(it, FWD);
}

int kv_iter_seek_last(kv_iter *it)
{
	kv_key key = {.inf = true};
	kv_cur_rel = it->rel;
	if (it->has_hi)
		key = (kv_key){.p = it->hi, .len = it->hil};
	it->cur.valid = false;
	if (it->has_hi && it->hil == 0)
		return WALRUS_OK; /* nothing sorts below the empty key */
	ahead_reset(&it->ahead, BACK);
	int rc = load_leaf(it, &key, KV_SEEK_LT, NULL);
	if (rc != WALRUS_OK)
		return rc;
	bool eq;
	it->pos =
	    (key.inf ? kvp_nslots(it->leaf) : kvn_lower_bound(it->leaf, key.p, key.len, &eq)) - 1;
	return settle(it, BACK);
}

/*
 * A scan spends most of its calls here: stepping within the copy needs
 * neither the pool nor a lock, only a decode of the next entry.
 */
bool kv_iter_next_local(kv_iter *it)
{
	int pos = it->pos + 1;
	if (!it->cur.valid || pos >= it->nslots)
		return false;
	uint16_t len;
	const char *item = kvp_item(it->leaf, pos, &len);
	kv_leaf_ent e;
	if (!kvl_decode(item, len, &e) || e.kind != KV_INLINE)
		return false;
	if (it->has_hi && cmp_whole(it, e.key, e.klen, it->hi, it->hil) >= 0)
		return false; /* the current key in kbuf stays whole */
	kv_key k = whole_key(it, e.key, e.klen);
	it->pos = pos;
	it->cur.key = k.p;
	it->cur.klen = k.len;
	it->cur.val = e.val;
	it->cur.vlen = e.vlen;
	return true;
}

int kv_iter_next(kv_iter *it)
{
	if (!it->cur.valid)
		return WALRUS_OK;
	if (kv_iter_next_local(it))
		return WALRUS_OK;
	kv_cur_rel = it->rel;
	it->pos++;
	return settle(it, FWD);
}

int kv_iter_prev(kv_iter *it)
{
	if (!it->cur.valid)
		return WALRUS_OK;
	kv_cur_rel = it->rel;
	it->pos--;
	return settle(it, BACK);
}

bool kv_iter_valid(const kv_iter *it)
{
	return it->cur.valid;
}

const kv_iter_cur *kv_iter_current(const kv_iter *it)
{
	return &it->cur;
}

void kv_iter_key(const kv_iter *it, const void **k, size_t *kl)
{
	*k = it->cur.key;
	*kl = it->cur.klen;
}

void kv_iter_value(const kv_iter *it, const void **v, size_t *vl)
{
	*v = it->cur.val;
	*vl = it->cur.vlen;
}

void kv_iter_close(kv_iter *it)
{
	if (it == NULL)
		return;
	free(it->vbuf);
	free(it);
}
