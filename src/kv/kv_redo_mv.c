/*
 * kv_redo_mv.c - versions for a standby's snapshots.
 *
 * Redo applies a batch as page ops, which say nothing of keys: a split
 * moves entries, a put changes one.  While a snapshot lives on the
 * standby, the batch's pages are copied before redo touches them and again
 * after each record's ops; comparing the entries of the leaves before and
 * after gives the batch's logical changes (a key moved by a split is in
 * both, with the same value; a value is the same when its bytes, or its
 * overflow chain's id, are).  Each change's value before the batch goes to
 * the version store (kv_mvcc.c), as a writer on the primary notes it, while
 * redo still holds every page of the batch locked (wal_redo_hold): no
 * reader sees the batch before its versions.  A compaction's batches change
 * no key and note nothing.
 *
 * An overflow value before the batch is read from the copies of the pages
 * the batch changed (they may be freed and reused by it) and from the pool
 * for the rest (untouched, intact).  A page redo could not read before the
 * batch (other than one past the file's end: a new page) invalidates the
 * snapshots older than the batch rather than redo.
 *
 * Interface: kv_int.h ("kv_redo_mv.c").
 */
#include <stdlib.h>
#include <string.h>

#include "buffer/buffer.h"
#include "kv/kv_int.h"

typedef struct rv_page {
	wr_relid rel;
	wr_blkno blk;
	char *before; /* NULL: no page before the batch */
	char *after;  /* NULL: the batch left it alone (not reached) */
} rv_page;

static struct {
	rv_page *p;
	size_t n, cap;
	bool on;
} rv;

/* One leaf entry, its whole key copied. */
typedef struct rv_ent {
	char *key;
	uint16_t klen;
	kv_leaf_ent e;
} rv_ent;

typedef struct rv_list {
	rv_ent *e;
	size_t n, cap;
} rv_list;

static int blk_cmp(const void *a, const void *b)
{
	const rv_page *x = a, *y = b;
	if (x->rel != y->rel)
		return x->rel < y->rel ? -1 : 1;
	return x->blk < y->blk ? -1 : x->blk > y->blk;
}

/* The current tree's page @blk. */
static rv_page *find_page(wr_blkno blk)
{
	rv_page key = {.rel = kv_cur_rel, .blk = blk};
	return rv.n == 0 ? NULL : bsearch(&key, rv.p, rv.n, sizeof(*rv.p), blk_cmp);
}

static char *copy_before(wr_relid rel, wr_blkno blk, wr_blkno nblocks)
{
	if (blk >= nblocks)
		return NULL; /* a new page */
	int buf;
	if (buf_read(rel, blk, &buf) != WALRUS_OK) {
		wr_log(WR_WARNING,
		       "could not read block %u of relation %u before replaying a batch: "
		       "snapshots older than it lose their versions",
		       blk, rel);
		kv_mv_lose_open_batch();
		return NULL;
	}
	char *copy = malloc(WR_PAGE_SIZE);
	if (copy != NULL) {
		buf_lock(buf, false);
		memcpy(copy, buf_page(buf), WR_PAGE_SIZE);
		buf_unlock(buf);
	} else {
		kv_mv_lose_open_batch();
	}
	buf_release(buf);
	return copy;
}

void kv_rv_begin(const kv_rv_blk *blks, size_t n)
{
	rv.n = 0;
	rv.on = true;
	if (wr_grow(&rv.p, &rv.cap, n, sizeof(*rv.p), 16) != WALRUS_OK) {
		kv_mv_lose_open_batch();
		rv.on = false;
		return;
	}
	for (size_t i = 0; i < n; i++)
		rv.p[rv.n++] = (rv_page){.rel = blks[i].rel, .blk = blks[i].blk};
	qsort(rv.p, rv.n, sizeof(*rv.p), blk_cmp);
	size_t u = 0; /* distinct */
	for (size_t i = 0; i < rv.n; i++)
		if (u == 0 || blk_cmp(&rv.p[u - 1], &rv.p[i]) != 0)
			rv.p[u++] = rv.p[i];
	rv.n = u;
	wr_blkno nblocks = 0;
	for (size_t i = 0; i < rv.n; i++) {
		if (i == 0 || rv.p[i].rel != rv.p[i - 1].rel) {
			smgr_rel *r;
			nblocks = 0;
			if (!smgr_exists(rv.p[i].rel) || smgr_open(rv.p[i].rel, &r) != WALRUS_OK ||
			    smgr_nblocks(r, &nblocks) != WALRUS_OK)
				wr_error_clear(); /* no file yet: every page is new */
		}
		rv.p[i].before = copy_before(rv.p[i].rel, rv.p[i].blk, nblocks);
	}
}

void kv_rv_after(wr_relid rel, wr_blkno blk, const char *page)
{
	if (!rv.on)
		return;
	rv_page key = {.rel = rel, .blk = blk};
	rv_page *p = rv.n == 0 ? NULL : bsearch(&key, rv.p, rv.n, sizeof(*rv.p), blk_cmp);
	if (p == NULL)
		return;
	if (p->after == NULL && (p->after = malloc(WR_PAGE_SIZE)) == NULL) {
		kv_mv_lose_open_batch();
		return;
	}
	memcpy(p->after, page, WR_PAGE_SIZE);
}

/* ---------------------------------------------------------------- the diff */

static bool is_leaf(const char *page)
{
	return page != NULL && kvp_sane_header(page) && kvp_type(page) == KV_PT_NODE &&
	       kvp_special(page).level == 0;
}

static bool collect(rv_list *l, const char *page)
{
	if (!is_leaf(page))
		return true;
	int n = kvp_nslots(page);
	for (int slot = KV_FIRST_SLOT; slot < n; slot++) {
		char kb[KV_MAX_KEY];
		uint16_t len = 0;
		rv_ent x = {0};
		const char *item = kvp_item(page, slot, &len);
		if (!kvl_decode(item, len, &x.e))
			continue; /* damage: verify's to report, not ours */
		kv_key k = kvn_entry_key(page, slot, kb);
		if (wr_grow(&l->e, &l->cap, l->n + 1, sizeof(*l->e), 64) != WALRUS_OK ||
		    (x.key = malloc(k.len ? k.len : 1)) == NULL)
			return false;
		memcpy(x.key, k.p, k.len);
		x.klen = k.len;
		l->e[l->n++] = x;
	}
	return true;
}

static int ent_cmp(const void *a, const void *b)
{
	const rv_ent *x = a, *y = b;
	return kv_cmp(x->key, x->klen, y->key, y->klen);
}

static bool same_value(const kv_leaf_ent *a, const kv_leaf_ent *b)
{
	if (a->kind != b->kind || a->vlen != b->vlen)
		return false;
	if (a->kind == KV_OVERFLOW)
		return a->ref.id == b->ref.id;
	return a->vlen == 0 || memcmp(a->val, b->val, a->vlen) == 0;
}

/* One page of an overflow chain as it was before the batch. */
static bool chain_page(wr_blkno blk, char *out)
{
	rv_page *p = find_page(blk);
	if (p != NULL) {
		if (p->before == NULL)
			return false;
		memcpy(out, p->before, WR_PAGE_SIZE);
		return true;
	}
	int buf;
	if (buf_read(kv_cur_rel, blk, &buf) != WALRUS_OK)
		return false;
	buf_lock(buf, false);
	memcpy(out, buf_page(buf), WR_PAGE_SIZE);
	buf_unlock(buf);
	buf_release(buf);
	return true;
}

static bool read_chain(const kv_ovf_ref *ref, char *dst)
{
	char *page = malloc(WR_PAGE_SIZE);
	if (page == NULL)
		return false;
	uint32_t off = 0, seq = 0;
	wr_blkno blk = ref->first;
	bool ok = true;
	while (ok && off < ref->vlen) {
		ok =
		    blk != WR_INVALID_BLKNO && chain_page(blk, page) && kvp_type(page) == KV_PT_OVF;
		kv_ovf_hdr h = ok ? kvo_header(page) : (kv_ovf_hdr){0};
		ok = ok && h.id == ref->id && h.seq == seq && h.len > 0 &&
		     h.len <= ref->vlen - off && h.len <= KV_OVF_CHUNK;
		if (ok) {
			memcpy(dst + off, kvo_data(page), h.len);
			off += h.len;
			blk = kvp_special(page).right;
			seq++;
		}
	}
	free(page);
	return ok;
}

/* Notes @before (NULL: the key was absent) for the key of @x. */
static void note(const rv_ent *x, const rv_ent *before)
{
	if (before == NULL || before->e.kind != KV_OVERFLOW) {
		kv_mv_note_value(x->key, x->klen, before == NULL,
		                 before != NULL ? before->e.val : NULL,
		                 before != NULL ? before->e.vlen : 0);
		return;
	}
	char *v = malloc(before->e.vlen ? before->e.vlen : 1);
	if (v == NULL || !read_chain(&before->e.ref, v)) {
		kv_mv_lose_open_batch();
	} else {
		kv_mv_note_value(x->key, x->klen, false, v, before->e.vlen);
	}
	free(v);
}

static void list_free(rv_list *l)
{
	for (size_t i = 0; i < l->n; i++)
		free(l->e[i].key);
	free(l->e);
}

/* The diff of one tree's pages [from, to) of rv.p (kv_cur_rel). */
static void diff_tree(size_t from, size_t to)
{
	rv_list b = {0}, a = {0};
	bool ok = true;
	for (size_t i = from; ok && i < to; i++) {
		/* A page the batch never reached is as it was. */
		const char *after = rv.p[i].after != NULL ? rv.p[i].after : rv.p[i].before;
		ok = collect(&b, rv.p[i].before) && collect(&a, after);
	}
	if (!ok) {
		kv_mv_lose_open_batch();
	} else {
		qsort(b.e, b.n, sizeof(*b.e), ent_cmp);
		qsort(a.e, a.n, sizeof(*a.e), ent_cmp);
		size_t i = 0, j = 0;
		while (i < b.n || j < a.n) {
			int c = i == b.n ? 1 : j == a.n ? -1 : ent_cmp(&b.e[i], &a.e[j]);
			if (c < 0) { /* deleted */
				note(&b.e[i], &b.e[i]);
				i++;
			} else if (c > 0) { /* inserted */
				note(&a.e[j], NULL);
				j++;
			} else {
				if (!same_value(&b.e[i].e, &a.e[j].e))
					note(&b.e[i], &b.e[i]);
				i++;
				j++;
			}
		}
	}
	list_free(&b);
	list_free(&a);
}

void kv_rv_finish(void)
{
	if (!rv.on)
		return;
	wr_relid cur = kv_cur_rel;
	for (size_t i = 0, j; i < rv.n; i = j) {
		for (j = i + 1; j < rv.n && rv.p[j].rel == rv.p[i].rel;)
			j++;
		kv_cur_rel = rv.p[i].rel;
		diff_tree(i, j);
	}
	kv_cur_rel = cur;
	for (size_t i = 0; i < rv.n; i++) {
		free(rv.p[i].before);
		free(rv.p[i].after);
	}
	rv.n = 0;
	rv.on = false;
}
