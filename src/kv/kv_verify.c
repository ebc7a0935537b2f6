/*
 * kv_verify.c - checks the whole tree: every page read through the buffer
 * pool (so checksums are verified for pages not yet in memory), and the
 * tree's invariants (README.md), each problem reported with its block.
 *
 * The tree is walked level by level from the root, in key order: each
 * node's fences must be the bounds its parent gives it, its keys in order
 * and within them, its sibling links must name its neighbours on the level,
 * and the leftmost and rightmost nodes must reach infinity.  Overflow chains
 * are followed from their leaf entries and the free list from the meta
 * page.  Every block below the tree's end must be found exactly once.
 *
 * Takes the tree lock shared: writers wait, readers go on.
 *
 * Interface: kv.h (kv_verify).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buffer/buffer.h"
#include "kv/kv_int.h"

enum { SEEN_NONE, SEEN_META, SEEN_NODE, SEEN_OVF, SEEN_FREE };

/* A node expected on the level being checked, with the bounds its parent gave it. */
typedef struct vnode {
	wr_blkno blk;
	char *low, *high;
	uint16_t lowlen, highlen;
	bool lowinf, highinf;
} vnode;

typedef struct vlevel {
	vnode *v;
	size_t n, cap;
} vlevel;

typedef struct vstate {
	kv_verify_report_fn fn;
	void *arg;
	kv_verify_result *r;
	kv_meta m;
	uint8_t *seen;
	vlevel cur, next;
	wr_blkno prev, prev_right; /* the last node checked on this level */
	char page[WR_PAGE_SIZE];
} vstate;

static void report(vstate *vs, wr_blkno blk, const char *fmt, ...) WR_PRINTF(3, 4);

static void report(vstate *vs, wr_blkno blk, const char *fmt, ...)
{
	char msg[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	vs->r->errors++;
	wr_relid rel = kv_cur_rel; /* the callback may read another tree */
	if (vs->fn != NULL)
		vs->fn(vs->arg, blk, msg);
	kv_cur_rel = rel;
}

/* Copies block @blk into vs->page; false (reported) when it cannot be read. */
static bool read_block(vstate *vs, wr_blkno blk, char *dst)
{
	int buf;
	int rc = buf_read(kv_cur_rel, blk, &buf);
	if (rc != WALRUS_OK) {
		report(vs, blk, "block %u could not be read: %s", blk, walrus_errmsg());
		return false;
	}
	buf_lock(buf, false);
	memcpy(dst, buf_page(buf), WR_PAGE_SIZE);
	buf_unlock(buf);
	buf_release(buf);
	return true;
}

/* Marks @blk as used for @what; false (reported) when out of range or used already. */
static bool claim(vstate *vs, wr_blkno blk, uint8_t what, wr_blkno from)
{
	static const char *const names[] = {"", "the meta page", "a tree node", "an overflow page",
	                                    "a free page"};
	if (blk >= vs->m.nblocks) {
		report(vs, from, "block %u (referenced from block %u) is past the tree's end (%u)",
		       blk, from, vs->m.nblocks);
		return false;
	}
	if (vs->seen[blk] != SEEN_NONE) {
		report(vs, blk, "block %u is used twice: as %s and as %s (from block %u)", blk,
		       names[vs->seen[blk]], names[what], from);
		return false;
	}
	vs->seen[blk] = what;
	return true;
}

/* ---------------------------------------------------------------- levels */

static char *dup_key(const kv_key *k)
{
	char *p = malloc(k->len > 0 ? k->len : 1);
	if (p != NULL && k->len > 0)
		memcpy(p, k->p, k->len);
	return p;
}

static int level_add(vlevel *l, wr_blkno blk, const kv_key *low, const kv_key *high)
{
	if (wr_grow(&l->v, &l->cap, l->n + 1, sizeof(*l->v), 64) != WALRUS_OK)
		return wr_error(WALRUS_ENOMEM, "out of memory verifying the tree");
	vnode *n = &l->v[l->n];
	*n = (vnode){.blk = blk,
	             .lowlen = low->len,
	             .highlen = high->len,
	             .lowinf = low->inf,
	             .highinf = high->inf};
	n->low = dup_key(low);
	n->high = dup_key(high);
	if (n->low == NULL || n->high == NULL) {
		free(n->low);
		free(n->high);
		return wr_error(WALRUS_ENOMEM, "out of memory verifying the tree");
	}
	l->n++;
	return WALRUS_OK;
}

static void level_clear(vlevel *l)
{
	for (size_t i = 0; i < l->n; i++) {
		free(l->v[i].low);
		free(l->v[i].high);
	}
	l->n = 0;
}

/* ---------------------------------------------------------------- nodes */

static bool fence_is(const kv_key *f, const char *p, uint16_t len, bool inf)
{
	return f->inf == inf && (inf || kv_cmp(f->p, f->len, p, len) == 0);
}

static void check_fences(vstate *vs, const vnode *n, const char *page)
{
	kv_key low = kvn_low(page), high = kvn_high(page);
	if (!fence_is(&low, n->low, n->lowlen, n->lowinf))
		report(vs, n->blk, "block %u: low fence differs from the parent's key", n->blk);
	if (!fence_is(&high, n->high, n->highlen, n->highinf))
		report(vs, n->blk, "block %u: high fence differs from the parent's next key",
		       n->blk);
}

/* Sibling links against the previous node of the level. */
static void check_links(vstate *vs, const vnode *n, const kv_special *s)
{
	if (s->left != vs->prev)
		report(vs, n->blk, "block %u: left link %d, expected %d", n->blk, (int)s->left,
		       (int)vs->prev);
	if (vs->prev != WR_INVALID_BLKNO && vs->prev_right != n->blk)
		report(vs, vs->prev, "block %u: right link %d, expected %u", vs->prev,
		       (int)vs->prev_right, n->blk);
	vs->prev = n->blk;
	vs->prev_right = s->right;
}

static void check_chain(vstate *vs, wr_blkno leaf, const kv_ovf_ref *ref)
{
	char page[WR_PAGE_SIZE];
	uint32_t off = 0, seq = 0;
	wr_blkno blk = ref->first, last = WR_INVALID_BLKNO;
	while (off < ref->vlen) {
		if (blk == WR_INVALID_BLKNO || !claim(vs, blk, SEEN_OVF, leaf) ||
		    !read_block(vs, blk, page))
			return;
		kv_ovf_hdr h = kvo_header(page);
		if (kvp_type(page) != KV_PT_OVF || h.id != ref->id || h.seq != seq || h.len == 0 ||
		    h.len > ref->vlen - off) {
			report(vs, blk,
			       "block %u is not piece %u of the value (id %llu) of an entry "
			       "in leaf %u",
			       blk, seq, (unsigned long long)ref->id, leaf);
			return;
		}
		off += h.len;
		seq++;
		last = blk;
		blk = kvp_special(page).right;
	}
	vs->r->overflow += seq;
	if (last != ref->last)
		report(vs, leaf, "leaf %u names block %u as the end of a chain that ends at %u",
		       leaf, ref->last, last);
}

static void check_leaf_entry(vstate *vs, const vnode *n, const char *page, int slot)
{
	uint16_t len, prefix = kvp_special(page).prefix;
	kv_leaf_ent e;
	const char *item = kvp_item(page, slot, &len);
	if (!kvl_decode(item, len, &e)) {
		report(vs, n->blk, "block %u: malformed entry at slot %d", n->blk, slot);
		return;
	}
	vs->r->keys++;
	vs->r->prefix_bytes += prefix;
	if (e.kind == KV_OVERFLOW) {
		if (kvl_fits_inline((size_t)prefix + e.klen, e.vlen) || e.vlen > KV_MAX_VALUE)
			report(vs, n->blk, "block %u: slot %d has an overflow value of bad size %u",
			       n->blk, slot, e.vlen);
		check_chain(vs, n->blk, &e.ref);
	}
}

/* The child at @slot of internal @page goes to the next level with its bounds. */
static int add_child(vstate *vs, const vnode *n, const char *page, int slot)
{
	int last = kvp_nslots(page) - 1;
	kv_key low = slot == KV_FIRST_SLOT ? kvn_low(page) : kvn_inner_key(page, slot);
	kv_key high = slot == last ? kvn_high(page) : kvn_inner_key(page, slot + 1);
	if (slot == KV_FIRST_SLOT && kvn_inner_key(page, slot).len != 0)
		report(vs, n->blk, "block %u: the first entry has a key", n->blk);
	return level_add(&vs->next, kvn_child(page, slot), &low, &high);
}

/* Order of the entries and their place within the fences. */
static void check_order(vstate *vs, const vnode *n, const char *page, int level)
{
	kv_key low = kvn_low(page), high = kvn_high(page);
	int nslots = kvp_nslots(page);
	char kb[KV_MAX_KEY], pb[KV_MAX_KEY];
	for (int s = KV_FIRST_SLOT + (level > 0); s < nslots; s++) {
		kv_key k = kvn_entry_key(page, s, kb);
		bool first = s == KV_FIRST_SLOT + (level > 0);
		if (first && !low.inf && kv_cmp(k.p, k.len, low.p, low.len) < (level > 0 ? 1 : 0))
			report(vs, n->blk, "block %u: key at slot %d is below the low fence",
			       n->blk, s);
		if (!first) {
			kv_key p = kvn_entry_key(page, s - 1, pb);
			if (kv_cmp(p.p, p.len, k.p, k.len) >= 0)
				report(vs, n->blk, "block %u: keys out of order at slot %d", n->blk,
				       s);
		}
		if (s == nslots - 1 && !high.inf && kv_cmp(k.p, k.len, high.p, high.len) >= 0)
			report(vs, n->blk, "block %u: key at slot %d is not below the high fence",
			       n->blk, s);
	}
}

static int check_node(vstate *vs, const vnode *n, int level)
{
	char *page = vs->page;
	if (!claim(vs, n->blk, SEEN_NODE, n->blk) || !read_block(vs, n->blk, page))
		return WALRUS_OK;
	kv_special s = kvp_special(page);
	if (kvp_type(page) != KV_PT_NODE || !kvp_sane(page) || kvp_nslots(page) < KV_FIRST_SLOT ||
	    s.level != level || !kvn_entries_sane(page)) {
		report(vs, n->blk, "block %u is not a well-formed tree node of level %d", n->blk,
		       level);
		return WALRUS_OK;
	}
	check_fences(vs, n, page);
	check_links(vs, n, &s);
	check_order(vs, n, page, level);
	if (level > 0 && kvn_nentries(page) == 0)
		report(vs, n->blk, "internal block %u has no children", n->blk);
	int rc = WALRUS_OK;
	for (int slot = KV_FIRST_SLOT; rc == WALRUS_OK && slot < kvp_nslots(page); slot++) {
		if (level == 0)
			check_leaf_entry(vs, n, page, slot);
		else
			rc = add_child(vs, n, page, slot);
	}
	*(level == 0 ? &vs->r->leaves : &vs->r->internal) += 1;
	return rc;
}

static int check_level(vstate *vs, int level)
{
	vs->prev = WR_INVALID_BLKNO;
	vs->prev_right = WR_INVALID_BLKNO;
	int rc = WALRUS_OK;
	for (size_t i = 0; rc == WALRUS_OK && i < vs->cur.n; i++)
		rc = check_node(vs, &vs->cur.v[i], level);
	if (vs->prev != WR_INVALID_BLKNO && vs->prev_right != WR_INVALID_BLKNO)
		report(vs, vs->prev, "block %u: the last node of level %d has a right link %u",
		       vs->prev, level, vs->prev_right);
	level_clear(&vs->cur);
	vlevel t = vs->cur;
	vs->cur = vs->next;
	vs->next = t;
	return rc;
}

/* ---------------------------------------------------------------- meta, free list, leftovers */

static int check_meta(vstate *vs, wr_blkno nfile)
{
	if (!read_block(vs, 0, vs->page))
		return WALRUS_ECORRUPT;
	vs->m = kvm_get(vs->page);
	if (kvp_type(vs->page) != KV_PT_META || vs->m.magic != KV_META_MAGIC ||
	    vs->m.version != KV_META_VERSION || vs->m.height == 0 || vs->m.height > KV_MAX_HEIGHT ||
	    vs->m.nblocks < 2 || vs->m.nblocks > nfile) {
		report(vs, 0, "block 0 is not a valid meta page (height %u, %u blocks of %u)",
		       vs->m.height, vs->m.nblocks, nfile);
		return WALRUS_ECORRUPT;
	}
	vs->seen = calloc(vs->m.nblocks, 1);
	if (vs->seen == NULL)
		return wr_error(WALRUS_ENOMEM, "out of memory verifying the tree");
	vs->seen[0] = SEEN_META;
	vs->r->height = vs->m.height;
	vs->r->unused_tail = nfile - vs->m.nblocks;
	return WALRUS_OK;
}

static void check_free_list(vstate *vs)
{
	char page[WR_PAGE_SIZE];
	uint32_t count = 0;
	wr_blkno blk = vs->m.free_head, from = 0;
	while (blk != WR_INVALID_BLKNO) {
		if (!claim(vs, blk, SEEN_FREE, from) || !read_block(vs, blk, page))
			return;
		uint8_t t = kvp_type(page);
		if (t != KV_PT_FREE && t != KV_PT_OVF)
			report(vs, blk, "block %u is on the free list but is not a free page", blk);
		count++;
		from = blk;
		blk = kvp_special(page).right;
	}
	vs->r->free = count;
	if (count != vs->m.nfree)
		report(vs, 0, "the free list holds %u pages, the meta page says %u", count,
		       vs->m.nfree);
}

static void check_leftovers(vstate *vs)
{
	for (wr_blkno b = 1; b < vs->m.nblocks; b++)
		if (vs->seen[b] == SEEN_NONE)
			report(vs, b,
			       "block %u is lost: not in the tree, an overflow chain or the "
			       "free list",
			       b);
	if (vs->r->keys != vs->m.nkeys)
		report(vs, 0, "the tree holds %llu keys, the meta page says %llu",
		       (unsigned long long)vs->r->keys, (unsigned long long)vs->m.nkeys);
}

static int verify_locked(vstate *vs)
{
	smgr_rel *rel;
	wr_blkno nfile;
	int rc = smgr_exists(kv_cur_rel)
	             ? smgr_open(kv_cur_rel, &rel)
	             : wr_error(WALRUS_ENOENT, "relation %u does not exist", kv_cur_rel);
	if (rc == WALRUS_OK)
		rc = smgr_nblocks(rel, &nfile);
	if (rc == WALRUS_OK)
		rc = check_meta(vs, nfile);
	if (rc != WALRUS_OK)
		return rc;
	kv_key inf = {.inf = true};
	rc = level_add(&vs->cur, vs->m.root, &inf, &inf);
	for (int level = (int)vs->m.height - 1; rc == WALRUS_OK && level >= 0; level--)
		rc = check_level(vs, level);
	if (rc == WALRUS_OK && vs->cur.n > 0)
		report(vs, vs->cur.v[0].blk, "leaves have children (block %u)", vs->cur.v[0].blk);
	if (rc != WALRUS_OK)
		return rc;
	check_free_list(vs);
	check_leftovers(vs);
	vs->r->pages = vs->m.nblocks;
	return WALRUS_OK;
}

int kv_verify(kv_verify_report_fn fn, void *arg, kv_verify_result *r)
{
	return kv_verify_in(KV_REL, fn, arg, r);
}

int kv_verify_in(wr_relid tree, kv_verify_report_fn fn, void *arg, kv_verify_result *r)
{
	kv_cur_rel = tree;
	kv_verify_result local;
	vstate *vs = calloc(1, sizeof(*vs));
	if (vs == NULL)
		return wr_error(WALRUS_ENOMEM, "out of memory verifying the tree");
	vs->fn = fn;
	vs->arg = arg;
	vs->r = r != NULL ? r : &local;
	memset(vs->r, 0, sizeof(*vs->r));
	rw_lock_shared(&kv_sh->tree_lock);
	int rc = verify_locked(vs);
	rw_unlock(&kv_sh->tree_lock);
	level_clear(&vs->cur);
	level_clear(&vs->next);
	free(vs->cur.v);
	free(vs->next.v);
	free(vs->seen);
	uint64_t errors = vs->r->errors;
	free(vs);
	if ((rc == WALRUS_OK || rc == WALRUS_ECORRUPT) && errors > 0)
		rc = wr_error(WALRUS_ECORRUPT, "the tree of relation %u has %llu problem(s)", tree,
		              (unsigned long long)errors);
	return rc;
}
