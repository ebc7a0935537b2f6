/*
 * kv_modify.c - put and delete inside a batch: leaf changes, splits up to a
 * new root, removal of empty leaves, overflow chains.
 *
 * The writer holds the tree lock, so the path it read from the root stays
 * true until it changes the tree itself; no move-right is needed here.
 * Every change goes through kvw_op (kv_write.c), which applies it and logs
 * it; the records of one operation may be several (a long overflow chain
 * needs one per 31 pages), which is safe because redo applies a batch whole.
 *
 * Splits: the items of the full page plus the new one are cut where both
 * halves fit with their fences and are closest in size (or, when appending
 * at the right end of the tree, where the left half is fullest, for
 * sequential loads).  A leaf split pushes up the shortest prefix of the
 * right half's first key that is above the left half's last key (suffix
 * truncation), so separators and fences stay short.  Size limits in
 * kv_int.h guarantee a cut exists.  Before a leaf splits, it tries to give
 * entries to a sibling with room ("shifts" below).
 *
 * Deletes: a leaf left empty is unlinked, with the ancestors it leaves
 * without children; the neighbour under the remaining parent (the left one,
 * or the right one for a first child) and its descendants along the facing
 * edge take over the key range, sibling links skip the removed nodes, and
 * these go to the free list.  A root left with one child is replaced by it.
 *
 * Interface: kv_int.h (kvm_put, kvm_delete).
 */
#include <stdlib.h>
#include <string.h>

#include "buffer/buffer.h"
#include "kv/kv_int.h"

/* The path of the last descent: node[l] at level l, slot[l] its entry in node[l + 1]. */
typedef struct wpath {
	int height;
	kvw_page *node[KV_MAX_HEIGHT];
	int slot[KV_MAX_HEIGHT];
} wpath;

static int bad_node(const kvw_page *p, const char *what)
{
	return wr_error(WALRUS_ECORRUPT, "block %u of relation %u: %s", p->blk, kv_cur_rel, what);
}

/*
 * A node of @level, well formed.  Every entry is decoded once while the
 * page stays in its buffer (buf_set_checked; the writers' own changes keep
 * it so), not once per batch: a random load's batches each touch a
 * thousand leaves, and decoding all of their entries was a fifth of it.
 */
static int check_node(kvw_page *p, int level)
{
	if (p->sane && kvp_special(p->page).level == level)
		return WALRUS_OK;
	bool checked = buf_checked(p->buf);
	/* A checked page's line pointers were bounded when its entries were
	 * decoded, and the writers keep them so: its header is enough (every
	 * line pointer again was a tenth of a small transaction's commit). */
	if (kvp_type(p->page) != KV_PT_NODE ||
	    !(checked ? kvp_sane_header(p->page) : kvp_sane(p->page)) ||
	    kvp_special(p->page).level != level || (!checked && !kvn_entries_sane(p->page)) ||
	    kvp_nslots(p->page) < KV_FIRST_SLOT + (level > 0))
		return bad_node(p, "not a tree node of the expected level");
	if (!checked)
		buf_set_checked(p->buf);
	p->sane = true;
	return WALRUS_OK;
}

static int descend(const void *k, uint16_t kl, wpath *path)
{
	kv_meta *m = kvw_meta();
	kv_key key = {.p = k, .len = kl};
	wr_blkno blk = m->root;
	path->height = (int)m->height;
	for (int level = path->height - 1; level >= 0; level--) {
		kvw_page *p;
		int rc = kvw_get(blk, &p);
		if (rc == WALRUS_OK)
			rc = check_node(p, level);
		if (rc != WALRUS_OK)
			return rc;
		path->node[level] = p;
		if (level > 0) {
			path->slot[level - 1] = kvn_child_slot(p->page, &key, false);
			blk = kvn_child(p->page, path->slot[level - 1]);
		}
	}
	return WALRUS_OK;
}

/* ---------------------------------------------------------------- overflow chains */

static uint32_t chunks(uint32_t vlen)
{
	return (vlen + KV_OVF_CHUNK - 1) / KV_OVF_CHUNK;
}

/* Overflow page @p: piece @seq of value @id.  Not inlined: its page image
 * would stay in the callers' frames (kvm_put's and the allocations'). */
__attribute__((noinline)) static int ovf_page(kvw_page *p, uint64_t id, uint32_t seq,
                                              const char *data, uint32_t len, wr_blkno next)
{
	char img[WR_PAGE_SIZE];
	kvo_init(img, id, seq, data, len, next);
	return kvw_op_image(p, img);
}

/* Writes @v into new overflow pages, each naming the next. */
static int ovf_write(const char *v, uint32_t vl, kv_ovf_ref *ref)
{
	uint32_t n = chunks(vl);
	kvw_page *cur, *next = NULL;
	int rc = kvw_alloc(&cur);
	ref->vlen = vl;
	ref->id = kvw_next_value_id();
	ref->first = rc == WALRUS_OK ? cur->blk : WR_INVALID_BLKNO;
	for (uint32_t i = 0; rc == WALRUS_OK && i < n; i++) {
		uint32_t off = i * KV_OVF_CHUNK, len = WR_MIN(KV_OVF_CHUNK, vl - off);
		next = NULL;
		if (i + 1 < n)
			rc = kvw_alloc(&next);
		if (rc != WALRUS_OK)
			break;
		rc = ovf_page(cur, ref->id, i, v + off, len, next ? next->blk : WR_INVALID_BLKNO);
		ref->last = cur->blk;
		cur = next;
	}
	return rc;
}

static int ovf_free(const kv_ovf_ref *ref)
{
	kvw_page *last;
	int rc = kvw_get(ref->last, &last);
	if (rc != WALRUS_OK)
		return rc;
	if (kvp_type(last->page) != KV_PT_OVF || kvo_header(last->page).id != ref->id)
		return bad_node(last, "not the last page of the overflow chain that names it");
	return kvw_free_chain(last, ref->first, chunks(ref->vlen));
}

/* ---------------------------------------------------------------- splits */

/* The entries of a full node with the new item in place, and the chosen cut. */
typedef struct split_plan {
	int m;                                  /* entries, new one included */
	const char *item[WR_PAGE_SIZE / 4 + 1]; /* item bytes */
	uint16_t len[WR_PAGE_SIZE / 4 + 1];     /* item lengths */
	int k;                                  /* left gets [0, k), right [k, m) */
	char sep[KV_MAX_KEY];                   /* the separator pushed up */
	uint16_t seplen;
	char pfx[KV_MAX_KEY]; /* a leaf's prefix, which its items leave out */
	uint16_t pfxlen;
} split_plan;

/* An item's key as stored (a leaf's without its prefix). */
static kv_key item_key(const char *item, uint16_t len, int level)
{
	kv_key k = {.inf = false};
	if (level == 0) {
		memcpy(&k.len, item, sizeof(k.len));
		k.p = item + KV_LEAF_HDR;
	} else {
		k.p = item + KV_INNER_HDR;
		k.len = (uint16_t)(len - KV_INNER_HDR);
	}
	return k;
}

/* The shortest prefix of @b that sorts after @a (a < b). */
static uint16_t shortest_sep(const kv_key *a, const kv_key *b)
{
	uint16_t p = 0;
	while (p < a->len && p < b->len && a->p[p] == b->p[p])
		p++;
	return (uint16_t)WR_MIN(p + 1, b->len);
}

static int fence_size(const kv_key *f)
{
	return (f->inf ? 0 : f->len) + KV_LP_SIZE;
}

/* Separator length for a cut at @k; internal nodes push up the first right key whole. */
static uint16_t sep_len(const split_plan *sp, int k, int level)
{
	kv_key b = item_key(sp->item[k], sp->len[k], level);
	if (level > 0)
		return b.len;
	kv_key a = item_key(sp->item[k - 1], sp->len[k - 1], level);
	return (uint16_t)(sp->pfxlen + shortest_sep(&a, &b));
}

/* The separator of @seplen bytes for a cut at @k, a whole key, into @out. */
static void sep_at(const split_plan *sp, int k, int level, uint16_t seplen, char *out)
{
	kv_key b = item_key(sp->item[k], sp->len[k], level);
	uint16_t p = level == 0 ? sp->pfxlen : 0;
	memcpy(out, sp->pfx, p);
	memcpy(out + p, b.p, (size_t)(seplen - p));
}

/*
 * Sizes of both halves for a cut at @k (items, line pointers and fences);
 * @before is the size of the entries [0, k), @all of all m of them, so a
 * pass over the cuts stays linear in the entries (internal nodes hold
 * hundreds).
 */
static void cut_sizes(const split_plan *sp, int k, int level, const kv_key *low, const kv_key *high,
                      int before, int all, int *left, int *right)
{
	int sep = sep_len(sp, k, level) + KV_LP_SIZE;
	*left = fence_size(low) + sep + before;
	*right = sep + fence_size(high) + (all - before);
	if (level > 0) /* the right half's first entry loses its key */
		*right -= (int)sp->len[k] - (int)KV_INNER_HDR;
}

/* Picks the cut: balanced, or fullest-left when appending at the tree's right end. */
static bool choose_cut(split_plan *sp, int level, const char *page, bool append)
{
	kv_key low = kvn_low(page), high = kvn_high(page);
	int all = 0;
	for (int j = 0; j < sp->m; j++)
		all += sp->len[j] + KV_LP_SIZE;
	int best = -1, best_diff = 0, before = sp->len[0] + KV_LP_SIZE;
	for (int k = 1; k < sp->m; before += sp->len[k] + KV_LP_SIZE, k++) {
		int l, r;
		cut_sizes(sp, k, level, &low, &high, before, all, &l, &r);
		if (l > KV_NODE_SPACE || r > KV_NODE_SPACE)
			continue;
		int diff = append ? sp->m - k : (l > r ? l - r : r - l);
		if (best < 0 || diff < best_diff) {
			best = k;
			best_diff = diff;
		}
	}
	if (best < 0)
		return false;
	sp->k = best;
	sp->seplen = sep_len(sp, best, level);
	sep_at(sp, best, level, sp->seplen, sp->sep);
	return true;
}

static void plan_entries(split_plan *sp, const char *page, int slot, const char *item, uint16_t len)
{
	int n = kvp_nslots(page);
	kv_key pfx = kvn_prefix(page);
	memcpy(sp->pfx, pfx.p, pfx.len);
	sp->pfxlen = pfx.len;
	sp->m = 0;
	for (int s = KV_FIRST_SLOT; s <= n; s++) {
		if (s == slot) {
			sp->item[sp->m] = item;
			sp->len[sp->m++] = len;
		}
		if (s < n) {
			sp->item[sp->m] = kvp_item(page, s, &sp->len[sp->m]);
			sp->m++;
		}
	}
}

/* The common prefix of @a and the separator of @seplen bytes for a cut at
 * @k of a leaf's entries (sep_at's key, without building it). */
static uint16_t lcp_sep(const kv_key *a, const split_plan *sp, int k, uint16_t seplen)
{
	uint16_t n = kv_lcp(a->p, a->len, sp->pfx, sp->pfxlen);
	if (n < sp->pfxlen)
		return n;
	kv_key b = item_key(sp->item[k], sp->len[k], 0);
	return (uint16_t)(n + kv_lcp(a->p + n, (uint16_t)(a->len - n), b.p,
	                             (uint16_t)(seplen - sp->pfxlen)));
}

/*
 * The prefix of a split's new right leaf: what its fences share (a narrower
 * range than the left's: at least its prefix); for the new rightmost leaf,
 * what its low fence shares with its last entry (kvn_prefix_bound).
 */
static uint16_t right_prefix(const split_plan *sp, const kv_key *sep, const kv_key *high, int level)
{
	int last = sp->m - 1;
	if (level > 0)
		return 0;
	if (!high->inf)
		return kvn_prefix_for(sep, high);
	kv_key tail = item_key(sp->item[last], sp->len[last], 0);
	return lcp_sep(sep, sp, last, (uint16_t)(sp->pfxlen + tail.len));
}

/*
 * The new right node: fences [sep, high), entries [k, m); a leaf leaves out
 * all its fences share.  Not inlined (nor grow_root): its page image would be
 * in every frame of the split recursion.
 */
__attribute__((noinline)) static int build_right(const split_plan *sp, int level,
                                                 const kvw_page *left, kvw_page *right)
{
	char img[WR_PAGE_SIZE], buf[KV_LEAF_ITEM_MAX + KV_MAX_KEY];
	kv_special ls = kvp_special(left->page);
	kv_key sep = {.p = sp->sep, .len = sp->seplen}, high = kvn_high(left->page);
	kv_key from = {.p = sp->pfx, .len = sp->pfxlen};
	kvn_init(img, (uint16_t)level, 0, left->blk, ls.right, &sep, &high);
	kv_special rs = kvp_special(img);
	rs.prefix = right_prefix(sp, &sep, &high, level);
	kvp_set_special(img, &rs);
	for (int j = sp->k; j < sp->m; j++) {
		char first[KV_INNER_HDR];
		const char *it = sp->item[j];
		uint16_t len = sp->len[j];
		if (level > 0 && j == sp->k) { /* stands for the low fence: no key */
			memcpy(first, it, KV_INNER_HDR);
			it = first;
			len = KV_INNER_HDR;
		}
		if (level == 0 && rs.prefix != from.len) {
			len = kvl_reencode(it, len, &from, rs.prefix, buf);
			it = buf;
		}
		if (!kvp_insert(img, KV_FIRST_SLOT + j - sp->k, it, len))
			return bad_node(left, "split: the right half does not fit");
	}
	return kvw_op_image(right, img);
}

/*
 * A leaf whose fences came closer leaves out what they now share (a split's
 * left half, a leaf that gave entries away): the op costs a few WAL bytes and
 * shrinks every entry.
 */
static int grow_prefix(kvw_page *p)
{
	kv_special s = kvp_special(p->page);
	kv_key low = kvn_low(p->page), high = kvn_high(p->page);
	uint16_t to = kvn_prefix_for(&low, &high);
	if (s.level != 0 || to <= s.prefix)
		return WALRUS_OK;
	return kvw_op(p, KVOP_PREFIX, to, NULL, 0);
}

/* The old node keeps [0, k): cut, maybe insert the new item, new high fence and link. */
static int shrink_left(const split_plan *sp, kvw_page *left, kvw_page *right, int slot,
                       const char *item, uint16_t len)
{
	int keep = KV_FIRST_SLOT + sp->k;
	bool new_left = item != NULL && slot < keep;
	int rc = kvw_op(left, KVOP_TRUNCATE, (uint16_t)(new_left ? keep - 1 : keep), NULL, 0);
	if (rc == WALRUS_OK && new_left)
		rc = kvw_op(left, KVOP_INSERT, (uint16_t)slot, item, len);
	if (rc == WALRUS_OK)
		rc = kvw_op(left, KVOP_REPLACE, 1, sp->sep, sp->seplen);
	kv_special s = kvp_special(left->page);
	s.right = right->blk;
	s.flags &= (uint16_t)~KVN_HIGH_INF;
	if (rc == WALRUS_OK)
		rc = kvw_op_special(left, &s);
	return rc == WALRUS_OK ? grow_prefix(left) : rc;
}

/* @neighbour's left (or right) link now names @to. */
static int relink(wr_blkno neighbour, bool left_link, wr_blkno to)
{
	kvw_page *o;
	if (neighbour == WR_INVALID_BLKNO)
		return WALRUS_OK;
	int rc = kvw_get(neighbour, &o);
	if (rc != WALRUS_OK)
		return rc;
	kv_special s = kvp_special(o->page);
	*(left_link ? &s.left : &s.right) = to;
	return kvw_op_special(o, &s);
}

/* A new root (@root, just allocated) over the two halves of the old one. */
__attribute__((noinline)) static int grow_root(kvw_page *root, wr_blkno left, wr_blkno right,
                                               const char *sep, uint16_t seplen, int level)
{
	char img[WR_PAGE_SIZE];
	char it[KV_INNER_HDR + KV_MAX_KEY];
	kv_key inf = {.inf = true};
	kvn_init(img, (uint16_t)(level + 1), 0, WR_INVALID_BLKNO, WR_INVALID_BLKNO, &inf, &inf);
	kvp_insert(img, KV_FIRST_SLOT, it, kvi_encode(it, left, NULL, 0));
	kvp_insert(img, KV_FIRST_SLOT + 1, it, kvi_encode(it, right, sep, seplen));
	int rc = kvw_op_image(root, img);
	kv_meta *m = kvw_meta();
	m->root = root->blk;
	m->height++;
	return rc;
}

int kvm_split_point(const char *page, int slot, const char *item, uint16_t len, char *sep,
                    uint16_t *seplen)
{
	split_plan sp; /* ~21 KiB, but only leaf functions run on top of it */
	int level = kvp_special(page).level;
	bool append = (kvp_special(page).flags & KVN_HIGH_INF) && slot == kvp_nslots(page);
	plan_entries(&sp, page, slot, item, len);
	if (!choose_cut(&sp, level, page, append))
		return -1;
	memcpy(sep, sp.sep, sp.seplen);
	*seplen = sp.seplen;
	return sp.k;
}

static int insert_item(wpath *path, int level, int slot, const char *item, uint16_t len);

/*
 * Splits node path->node[level] to insert @item at @slot, then inserts the
 * separator into the parent (which may split in turn) or grows a new root.
 * With no item (@slot -1), the rightmost leaf splits off its last entry
 * (admit_key).
 */
static int split_insert(wpath *path, int level, int slot, const char *item, uint16_t len)
{
	/* On the heap (~21 KiB): a split runs deep in the call stack and may
	 * recurse; freed before the recursion into the parent. */
	split_plan *sp = malloc(sizeof(*sp));
	if (sp == NULL)
		return wr_error(WALRUS_ENOMEM, "out of memory splitting a node");
	kvw_page *node = path->node[level], *right;
	kv_special s = kvp_special(node->page);
	bool append = (s.flags & KVN_HIGH_INF) && (slot == kvp_nslots(node->page) || item == NULL);
	plan_entries(sp, node->page, slot, item, len);
	if (!choose_cut(sp, level, node->page, append)) {
		free(sp);
		return bad_node(node, "split: no cut point fits");
	}
	int rc = kvw_alloc(&right);
	if (rc == WALRUS_OK)
		rc = build_right(sp, level, node, right);
	if (rc == WALRUS_OK)
		rc = relink(s.right, true, right->blk);
	char sep[KV_INNER_HDR + KV_MAX_KEY];
	uint16_t seplen = sp->seplen;
	memcpy(sep + KV_INNER_HDR, sp->sep, seplen);
	if (rc == WALRUS_OK)
		rc = shrink_left(sp, node, right, slot, item, len);
	free(sp);
	if (rc != WALRUS_OK)
		return rc;
	kvw_count_split();
	if (level == 0 && (s.flags & KVN_HIGH_INF))
		kv_tree_claim()->rightmost_leaf = right->blk; /* the new end of the tree */
	if (level + 1 == path->height) {
		kvw_page *root; /* allocated here: grow_root's page image is not on the stack yet */
		rc = kvw_alloc(&root);
		if (rc != WALRUS_OK)
			return rc;
		return grow_root(root, node->blk, right->blk, sep + KV_INNER_HDR, seplen, level);
	}
	uint16_t ilen = kvi_encode(sep, right->blk, sep + KV_INNER_HDR, seplen);
	return insert_item(path, level + 1, path->slot[level] + 1, sep, ilen);
}

/* ---------------------------------------------------------------- shifts */

/*
 * A full leaf first gives entries to a sibling under the same parent, when
 * that leaves both with room (B*-tree style): random inserts then split only
 * pages whose neighbours are full too, and leaves stay fuller than the 2/3
 * that halving splits give (the data files' size after a random load).
 *
 * The entries move at the facing edge, so the two leaves keep adjacent key
 * ranges and the separator between them moves: the sibling's fence, the
 * leaf's fence and the parent's downlink key change together, in one batch.
 * Readers need nothing new: a reader that reaches the leaf for a key that
 * moved to the left sibling finds it below the leaf's low fence and starts
 * over (its copy of the parent was old); one that reaches it for a key that
 * moved right finds it at or past the high fence and moves right.
 */

/* Bytes a shift must leave free in both leaves, else the leaf splits: a
 * shift that frees less would be repeated at once by the next inserts. */
#define SHIFT_SLACK (KV_NODE_SPACE / 32)

typedef struct shift_plan {
	kvw_page *sib;
	bool left; /* the sibling is the left one: E[0, j) move there */
	int j;     /* entries that move */
	uint16_t seplen;
	uint16_t prefix; /* the sibling's prefix once its range includes theirs */
} shift_plan;

static int used_bytes(const char *page)
{
	return KV_NODE_SPACE - kvp_free_space(page);
}

/* Fence @slot's length of @page (0 for infinity: no shift reaches one). */
static int fence_len(const char *page, int slot)
{
	uint16_t len;
	kvp_item(page, slot, &len);
	return len;
}

/*
 * The prefix leaf @sib keeps once its facing fence is the separator for a
 * cut at @k (its range grows, so what its fences share may shrink; it never
 * grows here).  For the rightmost leaf as the right sibling, what the
 * separator shares with its last entry (kvn_prefix_bound).
 */
static uint16_t sib_prefix(const char *sib, bool left, const split_plan *sp, int k, uint16_t seplen)
{
	uint16_t cur = kvp_special(sib).prefix;
	if (cur == 0)
		return 0;
	char buf[KV_MAX_KEY];
	kv_key far = left ? kvn_low(sib) : kvn_high(sib);
	if (far.inf) {
		int n = kvp_nslots(sib);
		if (n <= KV_FIRST_SLOT)
			return 0;
		far = kvn_entry_key(sib, n - 1, buf);
	}
	uint16_t most = lcp_sep(&far, sp, k, seplen);
	return most < cur ? most : cur;
}

/*
 * The most balanced count of entries of @sp (the leaf's entries with the
 * new one) to give to @sib, with both leaves then SHIFT_SLACK under full;
 * false when there is none.  @node_used counts the new entry.  The sibling's
 * size counts its entries re-encoded for the prefix it keeps (longer when
 * it shrinks) and the moved ones encoded for it; the leaf's ignores that
 * its own may shrink.
 */
static bool plan_shift(const split_plan *sp, const char *node, int node_used, shift_plan *pl)
{
	const char *sib = pl->sib->page;
	int sib_used = used_bytes(sib), best = -1, best_diff = 0;
	int sib_fence = fence_len(sib, pl->left ? 1 : 0),
	    node_fence = fence_len(node, pl->left ? 0 : 1);
	int sib_n = kvn_nentries(sib), sib_pfx = kvp_special(sib).prefix;
	int moved = 0;
	for (int j = 1; j < sp->m; j++) {
		int e = pl->left ? j - 1 : sp->m - j; /* the entry that joins the move */
		moved += sp->len[e] + KV_LP_SIZE;
		int cut = pl->left ? j : sp->m - j;
		uint16_t sep = sep_len(sp, cut, 0);
		int to = sib_prefix(sib, pl->left, sp, cut, sep);
		int s = sib_used + sib_n * (sib_pfx - to) + moved + j * (sp->pfxlen - to) + sep -
		        sib_fence,
		    n = node_used - moved + sep - node_fence;
		if (s > KV_NODE_SPACE - SHIFT_SLACK || n > KV_NODE_SPACE - SHIFT_SLACK)
			continue;
		int diff = s > n ? s - n : n - s;
		if (best < 0 || diff < best_diff) {
			best = j;
			best_diff = diff;
			pl->prefix = (uint16_t)to;
		}
	}
	if (best < 0)
		return false;
	pl->j = best;
	pl->seplen = sep_len(sp, pl->left ? best : sp->m - best, 0);
	return true;
}

/* The sibling at parent slot @ps, a leaf linked to @node on the @left side. */
static bool shift_sibling(kvw_page *parent, int ps, kvw_page *node, bool left, kvw_page **sib)
{
	if (ps < KV_FIRST_SLOT || ps >= kvp_nslots(parent->page))
		return false;
	if (kvw_get(kvn_child(parent->page, ps), sib) != WALRUS_OK ||
	    check_node(*sib, 0) != WALRUS_OK) {
		wr_error_clear(); /* only a split can go on: let it decide and report */
		return false;
	}
	kv_special ss = kvp_special((*sib)->page), ns = kvp_special(node->page);
	return left ? ss.right == node->blk && ns.left == (*sib)->blk
	            : ss.left == node->blk && ns.right == (*sib)->blk;
}

/* The parent's downlink at @ps now carries @sep; false when it does not fit. */
static bool downlink_fits(const kvw_page *parent, int ps, uint16_t seplen)
{
	uint16_t old;
	kvp_item(parent->page, ps, &old);
	return kvp_free_space(parent->page) + old >= (int)KV_INNER_HDR + seplen;
}

/* Moves the plan's entries and sets the fences and the downlink (slot @ps of
 * the parent, the right one of the pair).  @slot is the new entry's; -1 when
 * there is none (compaction pouring a leaf into its left sibling). */
static int shift_apply(wpath *path, const split_plan *sp, const shift_plan *pl, int slot)
{
	kvw_page *node = path->node[0], *sib = pl->sib, *parent = path->node[1];
	int newpos = slot - KV_FIRST_SLOT; /* the new entry's index in sp */
	int first = pl->left ? 0 : sp->m - pl->j, end = first + pl->j;
	int cut = pl->left ? end : first;
	char sep[KV_INNER_HDR + KV_MAX_KEY],
	    buf[KV_LEAF_ITEM_MAX + KV_MAX_KEY]; /* entries may grow */
	kv_key from = {.p = sp->pfx, .len = sp->pfxlen};
	sep_at(sp, cut, 0, pl->seplen, sep + KV_INNER_HDR);
	int rc = WALRUS_OK;
	if (pl->prefix < kvp_special(sib->page).prefix) /* before its fence moves: see set_prefix */
		rc = kvw_op(sib, KVOP_PREFIX, pl->prefix, NULL, 0);
	if (rc == WALRUS_OK)
		rc = kvw_op(sib, KVOP_REPLACE, pl->left ? 1 : 0, sep + KV_INNER_HDR, pl->seplen);
	int at = pl->left ? kvp_nslots(sib->page) : KV_FIRST_SLOT;
	for (int e = first; rc == WALRUS_OK && e < end; e++) {
		const char *it = sp->item[e];
		uint16_t len = sp->len[e];
		if (pl->prefix != from.len) {
			len = kvl_reencode(it, len, &from, pl->prefix, buf);
			it = buf;
		}
		rc = kvw_op(sib, KVOP_INSERT, (uint16_t)(at + e - first), it, len);
	}
	int own = pl->j - (newpos >= first && newpos < end); /* the leaf's entries that left */
	for (int i = 0; rc == WALRUS_OK && pl->left && i < own; i++)
		rc = kvw_op(node, KVOP_DELETE, KV_FIRST_SLOT, NULL, 0);
	if (rc == WALRUS_OK && !pl->left)
		rc = kvw_op(node, KVOP_TRUNCATE, (uint16_t)(kvp_nslots(node->page) - own), NULL, 0);
	if (rc == WALRUS_OK)
		rc = kvw_op(node, KVOP_REPLACE, pl->left ? 0 : 1, sep + KV_INNER_HDR, pl->seplen);
	if (rc == WALRUS_OK && slot >= 0 && (newpos < first || newpos >= end))
		rc = kvw_op(node, KVOP_INSERT, (uint16_t)(pl->left ? slot - own : slot),
		            sp->item[newpos], sp->len[newpos]);
	if (rc == WALRUS_OK)
		rc = grow_prefix(node);
	int ps = path->slot[0] + (pl->left ? 0 : 1);
	wr_blkno right = pl->left ? node->blk : sib->blk;
	uint16_t ilen = kvi_encode(sep, right, sep + KV_INNER_HDR, pl->seplen);
	if (rc == WALRUS_OK)
		rc = kvw_op(parent, KVOP_REPLACE, (uint16_t)ps, sep, ilen);
	if (rc == WALRUS_OK && slot >= 0)
		kvw_count_shift();
	return rc;
}

/*
 * Inserts @item at @slot of the full leaf path->node[0] by moving entries to
 * a sibling, when one has room; *done when it did.  Not for appends at the
 * tree's right end, whose split already leaves the left page full.
 */
static int shift_insert(wpath *path, int slot, const char *item, uint16_t len, bool *done)
{
	*done = false;
	kvw_page *node = path->node[0], *parent = path->height > 1 ? path->node[1] : NULL;
	/* An optimisation must not make a batch fail: the siblings it pins stay
	 * pinned to the batch's end, and a split may follow that needs a new
	 * page per level and a new root. */
	if (parent == NULL || !kvw_pin_room(2 + (uint32_t)path->height + 1))
		return WALRUS_OK;
	split_plan *sp = malloc(sizeof(*sp)); /* ~21 KiB, as a split's */
	if (sp == NULL)
		return wr_error(WALRUS_ENOMEM, "out of memory shifting leaf entries");
	plan_entries(sp, node->page, slot, item, len);
	int node_used = used_bytes(node->page) + len + KV_LP_SIZE, ps = path->slot[0];
	shift_plan best = {0}, pl;
	for (int side = 0; side < 2; side++) {
		pl = (shift_plan){.left = side == 0};
		if (shift_sibling(parent, pl.left ? ps - 1 : ps + 1, node, pl.left, &pl.sib) &&
		    plan_shift(sp, node->page, node_used, &pl) &&
		    downlink_fits(parent, pl.left ? ps : ps + 1, pl.seplen) &&
		    (best.sib == NULL ||
		     kvp_free_space(pl.sib->page) > kvp_free_space(best.sib->page)))
			best = pl;
	}
	int rc = WALRUS_OK;
	if (best.sib != NULL) {
		rc = shift_apply(path, sp, &best, slot);
		*done = true;
	}
	free(sp);
	return rc;
}

static int insert_item(wpath *path, int level, int slot, const char *item, uint16_t len)
{
	kvw_page *node = path->node[level];
	if (kvp_free_space(node->page) >= len + KV_LP_SIZE)
		return kvw_op(node, KVOP_INSERT, (uint16_t)slot, item, len);
	bool append =
	    (kvp_special(node->page).flags & KVN_HIGH_INF) && slot == kvp_nslots(node->page);
	if (level == 0 && !append) {
		bool done;
		int rc = shift_insert(path, slot, item, len, &done);
		if (rc != WALRUS_OK || done)
			return rc;
	}
	return split_insert(path, level, slot, item, len);
}

/* ---------------------------------------------------------------- put */

static int decode_entry(const kvw_page *leaf, int slot, kv_leaf_ent *e)
{
	uint16_t len;
	const char *item = kvp_item(leaf->page, slot, &len);
	return kvl_decode(item, len, e) ? WALRUS_OK : bad_node(leaf, "bad leaf entry");
}

/* Whether an item of @len bytes can take the place of @leaf's item at @slot. */
static bool replace_fits(const kvw_page *leaf, int slot, uint16_t len)
{
	uint16_t oldlen;
	kvp_item(leaf->page, slot, &oldlen);
	/* The free space is at least the gap between lower and upper: summing
	 * the items (kvp_free_space) only when the gap falls short. */
	wr_page_header h = kvp_header(leaf->page);
	return h.upper - h.lower + oldlen >= len || kvp_free_space(leaf->page) + oldlen >= len;
}

/* Replaces the entry of @k at @slot of @leaf; the old value's chain goes to
 * the free list, after the version store kept the old value (kv_mvcc.c).
 * Without room for the new item, it is deleted and inserted again along
 * @path (NULL: the caller made sure it fits). */
static int replace_entry(kvw_page *leaf, wpath *path, int slot, const void *k, uint16_t kl,
                         const char *item, uint16_t len)
{
	kv_leaf_ent old;
	int rc = decode_entry(leaf, slot, &old);
	if (rc == WALRUS_OK)
		rc = kv_mv_note(k, kl, &old);
	if (rc == WALRUS_OK && old.kind == KV_OVERFLOW)
		rc = ovf_free(&old.ref);
	if (rc != WALRUS_OK)
		return rc;
	if (path == NULL || replace_fits(leaf, slot, len))
		return kvw_op(leaf, KVOP_REPLACE, (uint16_t)slot, item, len);
	rc = kvw_op(leaf, KVOP_DELETE, (uint16_t)slot, NULL, 0);
	return rc == WALRUS_OK ? insert_item(path, 0, slot, item, len) : rc;
}

static bool has_prefix(const void *k, uint16_t kl, const kv_key *p)
{
	return kl >= p->len && memcmp(k, p->p, p->len) == 0;
}

/* Shortens leaf @p's prefix to what @k shares with it, when its longer
 * entries and @k's (@len bytes with the whole key) fit; else *fits false. */
static int shorten_prefix(kvw_page *p, const void *k, uint16_t kl, uint16_t len, bool *fits)
{
	kv_key pfx = kvn_prefix(p->page);
	uint16_t q = kv_lcp(k, kl, pfx.p, pfx.len);
	int grow = kvn_nentries(p->page) * (pfx.len - q);
	*fits = kvp_free_space(p->page) >= grow + len - q + KV_LP_SIZE;
	return *fits ? kvw_op(p, KVOP_PREFIX, q, NULL, 0) : WALRUS_OK;
}

/* @item (with the whole key, *len bytes) as an entry of a leaf whose prefix
 * is @n bytes: @item itself, or re-encoded in @local. */
static const char *entry_for(const char *item, uint16_t *len, uint16_t n, char *local)
{
	kv_key whole = {.len = 0};
	if (n == 0)
		return item;
	*len = kvl_reencode(item, *len, &whole, n, local);
	return local;
}

/*
 * Makes the leaf at the bottom of @path ready for @k, whose entry (whole key)
 * is @len bytes.  Only the rightmost leaf can meet a key without its prefix
 * (its high fence is +inf, kvn_prefix_bound): such a key is above all its
 * entries.  The prefix shrinks to what the key shares with it when the
 * longer entries and the new one fit; otherwise the leaf splits off its
 * last entry (*again: descend again, to a leaf of one entry where they do).
 */
static int admit_key(wpath *path, const void *k, uint16_t kl, uint16_t len, bool *again)
{
	kv_key p = kvn_prefix(path->node[0]->page);
	bool fits;
	*again = false;
	if (has_prefix(k, kl, &p))
		return WALRUS_OK;
	int rc = shorten_prefix(path->node[0], k, kl, len, &fits);
	if (rc != WALRUS_OK || fits)
		return rc;
	*again = true;
	return split_insert(path, 0, -1, NULL, 0);
}

/*
 * The fast path of ascending loads (nbtree's rightmost-leaf hint): a key
 * above every key in the tree belongs to the rightmost leaf, so the writer
 * remembers that leaf (the tree slot's rightmost_leaf) and, when the next key is past
 * its last key and fits without a split, inserts there without descending.
 * A fillseq put then pins and checks one page of the tree instead of
 * height: the descent's pins and above all the sanity checks of the
 * internal nodes (linear in their hundreds of entries) were most of a put's
 * time in the tree.
 *
 * Why it is safe: the hint is only a guess and is checked on the page before
 * the descent is skipped.  The check reads the page unlocked, as the
 * descent reads every page: only the writer holding the tree lock changes
 * tree pages.  The leaf is locked only when the put goes there, so a batch
 * of random puts does not keep readers of the rightmost leaf waiting.  The block is below the
 * tree's end; the page is a well-formed leaf whose high fence is +inf, and only the rightmost leaf
 * of the tree has one (invariant 2 of README.md; freed nodes become FREE pages, pages past the end
 * are refused); it holds a key, and @k sorts after its last key, hence after its low fence.  So the
 * leaf covers @k, a descent would end there too, and the insert at its end is the very op the slow
 * path would log: readers and redo cannot tell the difference.  Only the writer holding the tree
 * lock reads or sets the hint, so it needs no atomics; an abort clears it.  Anything else (a
 * replace, a split, a stale hint) takes the descent, which sets the hint again.
 *
 * *done: the put was made here.
 */
static int put_rightmost(const void *k, uint16_t kl, const char *item, uint16_t len, bool *done)
{
	wr_blkno blk = kv_tree_claim()->rightmost_leaf;
	kvw_page *p;
	*done = false;
	/* The hint's leaf stays pinned to the batch's end even when the put goes
	 * elsewhere: skip it when the descent and a split need every pin left. */
	if (blk == 0 || blk >= kvw_meta()->nblocks || !kvw_pin_room(1 + kvw_meta()->height + 1))
		return WALRUS_OK;
	if (kvw_get(blk, &p) != WALRUS_OK) {
		wr_error_clear(); /* a page the descent may not need: let it decide */
		return WALRUS_OK;
	}
	if (kvp_type(p->page) != KV_PT_NODE || kvp_special(p->page).level != 0 ||
	    !(kvp_special(p->page).flags & KVN_HIGH_INF))
		return WALRUS_OK;
	if (check_node(p, 0) != WALRUS_OK) {
		wr_error_clear(); /* the descent decides, and reports */
		return WALRUS_OK;
	}
	int n = kvp_nslots(p->page);
	if (n <= KV_FIRST_SLOT)
		return WALRUS_OK;
	/* A key without the leaf's prefix: shorten it, when that and the key fit
	 * (else the descent splits, admit_key). */
	kv_key pfx = kvn_prefix(p->page);
	if (!has_prefix(k, kl, &pfx)) {
		bool fits;
		if (kv_cmp(k, kl, pfx.p, pfx.len) < 0)
			return WALRUS_OK; /* below every key with the prefix: another leaf's */
		int rc = shorten_prefix(p, k, kl, len, &fits);
		if (rc != WALRUS_OK || !fits)
			return rc;
		pfx = kvn_prefix(p->page);
	}
	kv_key last = kvn_leaf_key(p->page, n - 1);
	const char *tail = (const char *)k + pfx.len;
	uint16_t tl = (uint16_t)(kl - pfx.len);
	if (kv_cmp(tail, tl, last.p, last.len) <= 0 ||
	    kvp_free_space(p->page) < len - pfx.len + KV_LP_SIZE)
		return WALRUS_OK;
	char local[KV_LEAF_ITEM_MAX];
	item = entry_for(item, &len, pfx.len, local);
	int rc = kv_mv_note(k, kl, NULL);
	if (rc == WALRUS_OK)
		rc = kvw_op(p, KVOP_INSERT, (uint16_t)n, item, len);
	if (rc == WALRUS_OK) {
		kvw_meta()->nkeys++;
		kvw_count_fastpath();
		*done = true;
	}
	return rc;
}

/* Whether @k (with @leaf's prefix @pfx) belongs at @slot of @leaf: there
 * (@found), or between its neighbours and inside the fences. */
static bool key_at_slot(const char *leaf, const kv_key *pfx, const void *k, uint16_t kl, int slot,
                        bool found)
{
	int n = kvp_nslots(leaf);
	const char *tail = (const char *)k + pfx->len;
	uint16_t tl = (uint16_t)(kl - pfx->len);
	if (slot < KV_FIRST_SLOT || slot > n || (found && slot == n))
		return false;
	if (slot < n) {
		kv_key at = kvn_leaf_key(leaf, slot);
		int c = kv_cmp(tail, tl, at.p, at.len);
		if (found || c >= 0)
			return found && c == 0;
	}
	if (slot > KV_FIRST_SLOT) {
		kv_key before = kvn_leaf_key(leaf, slot - 1);
		if (kv_cmp(tail, tl, before.p, before.len) <= 0)
			return false;
	}
	kv_key low = kvn_low(leaf), high = kvn_high(leaf);
	return (slot > KV_FIRST_SLOT || low.inf || kv_cmp(k, kl, low.p, low.len) >= 0) &&
	       (slot < n || high.inf || kv_cmp(k, kl, high.p, high.len) < 0);
}

/*
 * A transaction's put of a key it read: the read noted the leaf it found
 * the key in (or its place), with the leaf's LSN and the slot (@h).  A
 * descent to it pins and searches the root as well, and the rightmost-leaf
 * hint's leaf: a fifth of a small transaction's commit.  The leaf is taken
 * when its LSN is still the one the read saw (no batch changed it since:
 * every change is logged and stamps it, and an undone batch puts the page
 * back whole) and, checked on the page (this batch may have changed it
 * before stamping it), it is a leaf holding @k at that slot, or with its
 * place there; as put_rightmost's leaf, a well-formed leaf below the
 * tree's end that covers @k is the leaf a descent would find (invariant 2
 * of README.md).  Only a change that fits the leaf is made here: a split or
 * a shift needs the path, and takes the descent.  *done: the put was made.
 */
static int put_at_hint(const kv_leaf_hint *h, const void *k, uint16_t kl, const char *item,
                       uint16_t len, bool *done)
{
	kvw_page *p;
	*done = false;
	if (h == NULL || h->blk == 0 || h->blk >= kvw_meta()->nblocks ||
	    !kvw_pin_room(1 + kvw_meta()->height + 1))
		return WALRUS_OK;
	if (kvw_get(h->blk, &p) != WALRUS_OK) {
		wr_error_clear(); /* the descent decides */
		return WALRUS_OK;
	}
	if (page_get_lsn(p->page) != h->lsn || kvp_type(p->page) != KV_PT_NODE ||
	    kvp_special(p->page).level != 0)
		return WALRUS_OK;
	if (check_node(p, 0) != WALRUS_OK) {
		wr_error_clear(); /* the descent decides, and reports */
		return WALRUS_OK;
	}
	kv_key pfx = kvn_prefix(p->page);
	if (!has_prefix(k, kl, &pfx) || !key_at_slot(p->page, &pfx, k, kl, h->slot, h->found))
		return WALRUS_OK;
	char local[KV_LEAF_ITEM_MAX];
	const char *it = entry_for(item, &len, pfx.len, local);
	int rc;
	if (h->found) {
		if (!replace_fits(p, h->slot, len))
			return WALRUS_OK;
		rc = replace_entry(p, NULL, h->slot, k, kl, it, len);
	} else {
		if (kvp_free_space(p->page) < len + KV_LP_SIZE)
			return WALRUS_OK;
		rc = kv_mv_note(k, kl, NULL);
		if (rc == WALRUS_OK)
			rc = kvw_op(p, KVOP_INSERT, h->slot, it, len);
		if (rc == WALRUS_OK)
			kvw_meta()->nkeys++;
	}
	if (rc == WALRUS_OK) {
		kvw_count_hinted();
		*done = true;
	}
	return rc;
}

int kvm_put(const void *k, uint16_t kl, const void *v, uint32_t vl, const kv_leaf_hint *hint)
{
	char item[KV_LEAF_ITEM_MAX];
	uint16_t len;
	int rc = WALRUS_OK;
	if (kvl_fits_inline(kl, vl)) {
		len = kvl_encode_inline(item, k, kl, v, vl);
	} else {
		kv_ovf_ref ref;
		rc = ovf_write(v, vl, &ref);
		len = kvl_encode_ovf(item, k, kl, &ref);
	}
	bool done = false;
	if (rc == WALRUS_OK)
		rc = put_at_hint(hint, k, kl, item, len, &done);
	if (rc == WALRUS_OK && !done)
		rc = put_rightmost(k, kl, item, len, &done);
	if (rc != WALRUS_OK || done)
		return rc;
	wpath path;
	for (int round = 0;; round++) {
		bool again = false;
		rc = descend(k, kl, &path);
		if (rc == WALRUS_OK)
			rc = admit_key(&path, k, kl, len, &again);
		if (rc != WALRUS_OK || !again)
			break;
		if (round > 0) /* the split left a leaf of one entry: room for any prefix */
			return bad_node(path.node[0],
			                "no room for a key without the leaf's prefix");
	}
	if (rc != WALRUS_OK)
		return rc;
	kv_special ls = kvp_special(path.node[0]->page);
	if (ls.flags & KVN_HIGH_INF)
		kv_tree_claim()->rightmost_leaf = path.node[0]->blk;
	char local[KV_LEAF_ITEM_MAX];
	const char *it = entry_for(item, &len, ls.prefix, local); /* admitted: it has the prefix */
	bool eq;
	int slot = kvn_lower_bound(path.node[0]->page, k, kl, &eq);
	if (eq)
		return replace_entry(path.node[0], &path, slot, k, kl, it, len);
	rc = kv_mv_note(k, kl, NULL);
	if (rc != WALRUS_OK)
		return rc;
	kvw_meta()->nkeys++;
	return insert_item(&path, 0, slot, it, len);
}

/* ---------------------------------------------------------------- delete */

/* The prefix a node keeps once its fence @slot is @f (a range that grows
 * may share less). */
static uint16_t prefix_with_fence(const char *page, int slot, const kv_key *f)
{
	kv_key low = slot == 0 ? *f : kvn_low(page), high = slot == 1 ? *f : kvn_high(page);
	uint16_t most = kvn_prefix_for(&low, &high), cur = kvp_special(page).prefix;
	return most < cur ? most : cur;
}

/* Whether @page has room to exchange fence @slot for @f, with its entries
 * longer if its prefix shrinks. */
static bool fence_fits(const char *page, int slot, const kv_key *f)
{
	uint16_t old;
	kvp_item(page, slot, &old);
	int grow =
	    kvn_nentries(page) * (kvp_special(page).prefix - prefix_with_fence(page, slot, f));
	return kvp_free_space(page) + old >= (f->inf ? 0 : f->len) + grow;
}

static int set_fence(kvw_page *p, int slot, const kv_key *f, uint16_t inf_flag, bool left,
                     wr_blkno link)
{
	uint16_t to = prefix_with_fence(p->page, slot, f);
	int rc = WALRUS_OK;
	if (to < kvp_special(p->page).prefix) /* before the fence moves: see set_prefix */
		rc = kvw_op(p, KVOP_PREFIX, to, NULL, 0);
	if (rc == WALRUS_OK)
		rc = kvw_op(p, KVOP_REPLACE, (uint16_t)slot, f->p, f->inf ? 0 : f->len);
	kv_special s = kvp_special(p->page);
	s.flags = (uint16_t)((s.flags & ~inf_flag) | (f->inf ? inf_flag : 0));
	if (left)
		s.left = link;
	else
		s.right = link;
	return rc == WALRUS_OK ? kvw_op_special(p, &s) : rc;
}

/*
 * An empty chain: c[0] is the empty leaf, c[1..top] its ancestors that have
 * no other child; the parent above c[top] has another child S next to it.
 * S and its descendants along the edge facing the chain (d[top] .. d[0])
 * take over the chain's key range, level by level.
 */
typedef struct chain {
	int top;
	bool into_left; /* S is the left neighbour, else the right one */
	kvw_page *c[KV_MAX_HEIGHT], *d[KV_MAX_HEIGHT];
	kv_key fence; /* the chain's far fence: S's new high (or low) fence */
} chain;

/* d[top] .. d[0], checked to be the chain's neighbours level by level. */
static int edge_path(chain *ch, kvw_page *parent, int ps)
{
	wr_blkno s = kvn_child(parent->page, ch->into_left ? ps - 1 : ps + 1);
	int rc = kvw_get(s, &ch->d[ch->top]);
	for (int l = ch->top; rc == WALRUS_OK; l--) {
		kvw_page *d = ch->d[l], *c = ch->c[l];
		rc = check_node(d, l);
		kv_special ds = kvp_special(d->page), cs = kvp_special(c->page);
		bool linked = ch->into_left ? ds.right == c->blk && cs.left == d->blk
		                            : ds.left == c->blk && cs.right == d->blk;
		if (rc == WALRUS_OK && !linked)
			rc = bad_node(d, "sibling links disagree with the parent");
		if (rc != WALRUS_OK || l == 0)
			break;
		int slot = ch->into_left ? kvp_nslots(d->page) - 1 : KV_FIRST_SLOT;
		rc = kvw_get(kvn_child(d->page, slot), &ch->d[l - 1]);
	}
	return rc;
}

static bool edge_fits(const chain *ch)
{
	for (int l = 0; l <= ch->top; l++)
		if (!fence_fits(ch->d[l]->page, ch->into_left ? 1 : 0, &ch->fence))
			return false;
	return true;
}

/* At level @l, d takes c's key range and its place among the siblings. */
static int take_over(const chain *ch, int l)
{
	kv_special cs = kvp_special(ch->c[l]->page);
	kvw_page *d = ch->d[l];
	int rc;
	if (ch->into_left) {
		rc = set_fence(d, 1, &ch->fence, KVN_HIGH_INF, false, cs.right);
		return rc == WALRUS_OK ? relink(cs.right, true, d->blk) : rc;
	}
	rc = set_fence(d, 0, &ch->fence, KVN_LOW_INF, true, cs.left);
	return rc == WALRUS_OK ? relink(cs.left, false, d->blk) : rc;
}

/* The parent drops its downlink to the chain (a new first child loses its key). */
static int unlink_chain(const chain *ch, kvw_page *parent, int ps)
{
	char it[KV_INNER_HDR];
	int rc = kvw_op(parent, KVOP_DELETE, (uint16_t)ps, NULL, 0);
	if (rc != WALRUS_OK || ch->into_left)
		return rc;
	return kvw_op(parent, KVOP_REPLACE, KV_FIRST_SLOT, it,
	              kvi_encode(it, ch->d[ch->top]->blk, NULL, 0));
}

/* While the root has a single child, that child becomes the root. */
static int collapse_root(void)
{
	kv_meta *m = kvw_meta();
	int rc = WALRUS_OK;
	while (rc == WALRUS_OK && m->height > 1) {
		kvw_page *root;
		rc = kvw_get(m->root, &root);
		if (rc != WALRUS_OK || kvn_nentries(root->page) != 1)
			break;
		m->root = kvn_child(root->page, KV_FIRST_SLOT);
		m->height--;
		rc = kvw_free_page(root);
	}
	return rc;
}

/* Unlinks the empty leaf at the bottom of @path, with ancestors it leaves
 * empty; *heir is the leaf that took its keys (NULL: it stays). */
static int remove_empty(wpath *path, kvw_page **heir)
{
	chain ch = {.top = 0};
	*heir = NULL;
	while (ch.top + 1 < path->height && kvn_nentries(path->node[ch.top + 1]->page) == 1)
		ch.top++;
	if (ch.top + 1 >= path->height)
		return WALRUS_OK; /* the tree's only leaf stays */
	kvw_page *parent = path->node[ch.top + 1];
	int ps = path->slot[ch.top];
	ch.into_left = ps > KV_FIRST_SLOT;
	for (int l = 0; l <= ch.top; l++)
		ch.c[l] = path->node[l];
	ch.fence = ch.into_left ? kvn_high(ch.c[ch.top]->page) : kvn_low(ch.c[ch.top]->page);
	int rc = edge_path(&ch, parent, ps);
	if (rc != WALRUS_OK || !edge_fits(&ch))
		return rc; /* a fence that does not fit: the empty leaf stays */
	for (int l = ch.top; rc == WALRUS_OK && l >= 0; l--)
		rc = take_over(&ch, l);
	if (rc == WALRUS_OK)
		rc = unlink_chain(&ch, parent, ps);
	for (int l = ch.top; rc == WALRUS_OK && l >= 0; l--)
		rc = kvw_free_page(ch.c[l]); /* the fence pointed into c[top]: used up by now */
	*heir = ch.d[0];
	return rc == WALRUS_OK ? collapse_root() : rc;
}

/*
 * Removes the empty leaf at the bottom of @path and, while the leaf that took
 * its keys is empty too, that one.  An empty leaf stays when its neighbour
 * has no room for the wider fence, or for its entries re-encoded with the
 * shorter prefix the wider range shares (at the tree's ends: none); it goes
 * when a neighbour emptied later takes it over, so deleting every key still
 * leaves a single leaf.  Stops short of the batch's pin limit: what stays is
 * only space.
 */
static int remove_empties(wpath *path)
{
	int rc = WALRUS_OK;
	while (rc == WALRUS_OK && path->height > 1 && kvn_nentries(path->node[0]->page) == 0) {
		kvw_page *heir;
		rc = remove_empty(path, &heir);
		if (rc != WALRUS_OK || heir == NULL || kvn_nentries(heir->page) > 0 ||
		    !kvw_pin_room(2 * kvw_meta()->height + 2))
			break;
		kv_key low = kvn_low(heir->page); /* descend() changes no page */
		rc = descend(low.inf ? "" : low.p, low.inf ? 0 : low.len, path);
		if (rc == WALRUS_OK && path->node[0] != heir)
			rc = bad_node(heir, "a descent for its low fence ends elsewhere");
	}
	return rc;
}

int kvm_delete(const void *k, uint16_t kl)
{
	wpath path;
	int rc = descend(k, kl, &path);
	if (rc != WALRUS_OK)
		return rc;
	kvw_page *leaf = path.node[0];
	bool eq;
	int slot = kvn_lower_bound(leaf->page, k, kl, &eq);
	if (!eq)
		return wr_error(WALRUS_ENOTFOUND, "key not found");
	kv_leaf_ent e;
	rc = decode_entry(leaf, slot, &e);
	if (rc == WALRUS_OK)
		rc = kv_mv_note(k, kl, &e);
	if (rc == WALRUS_OK && e.kind == KV_OVERFLOW)
		rc = ovf_free(&e.ref);
	if (rc == WALRUS_OK)
		rc = kvw_op(leaf, KVOP_DELETE, (uint16_t)slot, NULL, 0);
	if (rc != WALRUS_OK)
		return rc;
	kvw_meta()->nkeys--;
	return remove_empties(&path);
}

/* ---------------------------------------------------------------- compaction */

/*
 * Compaction (kv_compact.c) packs the leaves under each parent from left to
 * right: a leaf takes its right sibling's first entries while it stays
 * SHIFT_SLACK under full, as a shift would leave it, and the whole sibling
 * when all of it fits (the sibling is then unlinked and freed, as an empty
 * leaf is, but to the left only).  Readers need nothing new: a pour is a
 * shift without a new entry, a merge is the take-over of a leaf's range by
 * its left neighbour.
 */
#define PACK_LIMIT (KV_NODE_SPACE - SHIFT_SLACK)

/* The leaves at slots @ps and @ps + 1 of @parent, checked to be linked. */
static int pack_pair_pages(kvw_page *parent, int ps, kvw_page **left, kvw_page **right)
{
	int rc = kvw_get(kvn_child(parent->page, ps), left);
	if (rc == WALRUS_OK)
		rc = check_node(*left, 0);
	if (rc == WALRUS_OK)
		rc = kvw_get(kvn_child(parent->page, ps + 1), right);
	if (rc == WALRUS_OK)
		rc = check_node(*right, 0);
	if (rc != WALRUS_OK)
		return rc;
	kv_special ls = kvp_special((*left)->page), rs = kvp_special((*right)->page);
	if (ls.right != (*right)->blk || rs.left != (*left)->blk)
		return bad_node(*right, "sibling links disagree with the parent");
	return WALRUS_OK;
}

/*
 * Bytes leaf @left would use holding all of @right too, with the prefix *to
 * that the joined range allows (never longer than its own).
 */
static int merged_size(const char *left, const char *right, uint16_t *to)
{
	kv_key low = kvn_low(left), high = kvn_high(right);
	uint16_t cur = kvp_special(left).prefix, most = kvn_prefix_for(&low, &high);
	*to = most < cur ? most : cur;
	int rpfx = kvp_special(right).prefix, n = kvn_nentries(right);
	int size = used_bytes(left) + kvn_nentries(left) * (cur - *to) - fence_len(left, 1) +
	           (high.inf ? 0 : high.len);
	size += used_bytes(right) - fence_len(right, 0) - fence_len(right, 1) - 2 * KV_LP_SIZE +
	        n * (rpfx - *to);
	return size;
}

/* @left takes all of @right (slot @ps + 1 of @parent), which is freed. */
static int merge_right(kvw_page *parent, int ps, kvw_page *left, kvw_page *right, uint16_t to)
{
	char buf[KV_LEAF_ITEM_MAX + KV_MAX_KEY], from_b[KV_MAX_KEY], high_b[KV_MAX_KEY];
	kv_key from = kvn_prefix(right->page), high = kvn_high(right->page);
	memcpy(from_b, from.p, from.len);
	from.p = from_b;
	if (!high.inf) {
		memcpy(high_b, high.p, high.len);
		high.p = high_b;
	}
	kv_special rs = kvp_special(right->page);
	int rc = WALRUS_OK;
	if (to < kvp_special(left->page).prefix)
		rc = kvw_op(left, KVOP_PREFIX, to, NULL, 0);
	int at = kvp_nslots(left->page), n = kvp_nslots(right->page);
	for (int s = KV_FIRST_SLOT; rc == WALRUS_OK && s < n; s++) {
		uint16_t len;
		const char *it = kvp_item(right->page, s, &len);
		if (to != from.len) {
			len = kvl_reencode(it, len, &from, to, buf);
			it = buf;
		}
		rc = kvw_op(left, KVOP_INSERT, (uint16_t)at++, it, len);
	}
	if (rc == WALRUS_OK)
		rc = set_fence(left, 1, &high, KVN_HIGH_INF, false, rs.right);
	if (rc == WALRUS_OK)
		rc = relink(rs.right, true, left->blk);
	if (rc == WALRUS_OK)
		rc = kvw_op(parent, KVOP_DELETE, (uint16_t)(ps + 1), NULL, 0);
	if (rc == WALRUS_OK)
		rc = kvw_free_page(right);
	if (rc == WALRUS_OK && kv_tree_claim()->rightmost_leaf == right->blk)
		kv_tree_claim()->rightmost_leaf = left->blk;
	return rc;
}

/* The most of @sp's first entries (a right sibling's) that leaf @left can
 * take and stay PACK_LIMIT under full (plan_shift's sizes); false: none. */
static bool plan_pour(const split_plan *sp, const char *left, shift_plan *pl)
{
	int used = used_bytes(left), fence = fence_len(left, 1), n = kvn_nentries(left);
	int pfx = kvp_special(left).prefix, moved = 0;
	pl->j = 0;
	for (int j = 1; j < sp->m; j++) {
		moved += sp->len[j - 1] + KV_LP_SIZE;
		uint16_t sep = sep_len(sp, j, 0);
		int to = sib_prefix(left, true, sp, j, sep);
		int size = used + n * (pfx - to) + moved + j * (sp->pfxlen - to) + sep - fence;
		if (size > PACK_LIMIT)
			break;
		pl->j = j;
		pl->seplen = sep;
		pl->prefix = (uint16_t)to;
	}
	return pl->j > 0;
}

/* Pours the first entries of @right (slot @ps + 1 of @parent) into @left. */
static int pour_right(kvw_page *parent, int ps, kvw_page *left, kvw_page *right, int *result)
{
	split_plan *sp = malloc(sizeof(*sp)); /* ~21 KiB, as a split's */
	if (sp == NULL)
		return wr_error(WALRUS_ENOMEM, "out of memory packing leaves");
	plan_entries(sp, right->page, -1, NULL, 0);
	shift_plan pl = {.sib = left, .left = true};
	int rc = WALRUS_OK;
	if (plan_pour(sp, left->page, &pl) && downlink_fits(parent, ps + 1, pl.seplen)) {
		wpath path = {.height = 2, .node = {right, parent}, .slot = {ps + 1}};
		rc = shift_apply(&path, sp, &pl, -1);
		*result = KVM_PACK_POURED;
	}
	free(sp);
	return rc;
}

int kvm_pack_pair(kvw_page *parent, int ps, int *result)
{
	kvw_page *left, *right;
	*result = KVM_PACK_NONE;
	int rc = pack_pair_pages(parent, ps, &left, &right);
	if (rc != WALRUS_OK)
		return rc;
	uint16_t to;
	if (merged_size(left->page, right->page, &to) <= PACK_LIMIT) {
		*result = KVM_PACK_MERGED;
		return merge_right(parent, ps, left, right, to);
	}
	if (kvp_free_space(left->page) <= SHIFT_SLACK || kvn_nentries(right->page) < 2)
		return WALRUS_OK;
	return pour_right(parent, ps, left, right, result);
}

/*
 * Moves node @x to the free page @dest (already off the free list): its
 * image, its neighbours' links, its downlink (slot @ps of @parent; NULL:
 * @x is the root), then @x goes to the free list.
 */
int kvm_relocate(kvw_page *parent, int ps, kvw_page *x, kvw_page *dest)
{
	kv_special s = kvp_special(x->page);
	int rc = kvw_op_image(dest, x->page);
	if (rc == WALRUS_OK)
		rc = relink(s.left, false, dest->blk);
	if (rc == WALRUS_OK)
		rc = relink(s.right, true, dest->blk);
	if (rc == WALRUS_OK && parent != NULL) {
		char it[KV_INNER_HDR + KV_MAX_KEY];
		kv_key k = kvn_inner_key(parent->page, ps);
		rc = kvw_op(parent, KVOP_REPLACE, (uint16_t)ps, it,
		            kvi_encode(it, dest->blk, k.p, k.len));
	} else if (rc == WALRUS_OK) {
		kvw_meta()->root = dest->blk;
	}
	if (rc == WALRUS_OK && s.level == 0 && kv_tree_claim()->rightmost_leaf == x->blk)
		kv_tree_claim()->rightmost_leaf = dest->blk;
	return rc == WALRUS_OK ? kvw_free_page(x) : rc;
}

int kvm_leaf_parent(const void *k, uint16_t kl, kvw_page **parent, int *ps, kvw_page **leaf)
{
	wpath path;
	int rc = descend(k, kl, &path);
	if (rc != WALRUS_OK)
		return rc;
	*leaf = path.node[0];
	*parent = path.height > 1 ? path.node[1] : NULL;
	*ps = path.slot[0];
	return WALRUS_OK;
}

int kvm_check_node(kvw_page *p, int level)
{
	return check_node(p, level);
}

int kvm_collapse_root(void)
{
	return collapse_root();
}

/* Whether @p is piece @seq of value @id. */
static bool ovf_piece(const kvw_page *p, uint64_t id, uint32_t seq)
{
	kv_ovf_hdr h = kvo_header(p->page);
	return kvp_type(p->page) == KV_PT_OVF && h.id == id && h.seq == seq;
}

int kvm_ovf_move(const void *k, uint16_t kl, wr_blkno prev, wr_blkno blk, uint32_t seq,
                 kvw_page *dest)
{
	kvw_page *leaf, *parent, *x, *pp = NULL;
	int ps;
	bool eq;
	int rc = kvm_leaf_parent(k, kl, &parent, &ps, &leaf);
	int slot = rc == WALRUS_OK ? kvn_lower_bound(leaf->page, k, kl, &eq) : 0;
	kv_leaf_ent e;
	if (rc == WALRUS_OK && !eq)
		return bad_node(leaf, "compaction: the key of an overflow value is gone");
	if (rc == WALRUS_OK)
		rc = decode_entry(leaf, slot, &e);
	if (rc == WALRUS_OK && e.kind != KV_OVERFLOW)
		return bad_node(leaf, "compaction: the entry holds no overflow value");
	if (rc == WALRUS_OK)
		rc = kvw_get(blk, &x);
	if (rc == WALRUS_OK && !ovf_piece(x, e.ref.id, seq))
		return bad_node(x, "compaction: not the overflow page its value names");
	if (rc == WALRUS_OK && seq > 0)
		rc = kvw_get(prev, &pp);
	if (rc == WALRUS_OK && pp != NULL &&
	    (!ovf_piece(pp, e.ref.id, seq - 1) || kvp_special(pp->page).right != blk))
		return bad_node(pp, "compaction: not the page before the one to move");
	if (rc == WALRUS_OK)
		rc = kvw_op_image(dest, x->page);
	if (rc == WALRUS_OK && pp != NULL) {
		kv_special s = kvp_special(pp->page);
		s.right = dest->blk;
		rc = kvw_op_special(pp, &s);
	}
	if (rc == WALRUS_OK && (seq == 0 || blk == e.ref.last)) {
		char item[KV_LEAF_ITEM_MAX];
		uint16_t len;
		const char *old = kvp_item(leaf->page, slot, &len);
		kv_ovf_ref ref = e.ref;
		if (seq == 0)
			ref.first = dest->blk;
		if (blk == e.ref.last)
			ref.last = dest->blk;
		memcpy(item, old, len);
		memcpy(item + len - KV_OVF_REF_SIZE, &ref, KV_OVF_REF_SIZE);
		rc = kvw_op(leaf, KVOP_REPLACE, (uint16_t)slot, item, len);
	}
	return rc == WALRUS_OK ? kvw_free_page(x) : rc;
}
