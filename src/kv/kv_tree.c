/*
 * kv_tree.c - the tree's shared state and its readers: region "kv", the
 * B-link descent, point lookups, overflow reads, creation and statistics.
 *
 * Readers take no tree lock.  A descent holds one page content lock
 * (shared) at a time and trusts only what the page itself says: its type,
 * level and fences.  A key at or past the high fence means the page split
 * (or its right neighbour was merged into it) since the parent was read:
 * move right.  A key below the low fence, a free page, or a page of the
 * wrong level means the page was freed or reused: start again from the
 * root.  Since a writer changes pages only under exclusive locks that it
 * keeps until its whole batch is in memory, a reader sees each page either
 * before or after a batch, never in between.
 *
 * Overflow values are read one page at a time after the leaf lock is gone;
 * every page carries the value's id and its position in the chain, so a
 * chain freed and reused meanwhile is noticed and the lookup starts over.
 *
 * Interface: kv.h (kv_shmem_*, kv_attach, kv_get*, kv_create_if_missing,
 * kv_get_stats), kv_int.h (kv_descend, kv_ovf_read).
 */
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "buffer/buffer.h"
#include "kv/kv_int.h"

#define KV_MAX_RESTARTS 100000 /* a descent that never settles means a damaged tree */
#define KV_MAX_MOVES    100000 /* right-moves within one descent */

kv_shared *kv_sh;
WR_TLS wr_relid kv_cur_rel = KV_REL;
static kv_backend kv_default;
WR_TLS kv_backend *kv_me = &kv_default;
static _Atomic unsigned kv_next_stripe;

/* ---------------------------------------------------------------- region */

size_t kv_shmem_size(void)
{
	return sizeof(kv_shared);
}

/*
 * This process's copies of internal nodes, taken under their share locks
 * (at most one per slot, by block number; allocated on first use).  Descents
 * read a node's copy instead of pinning and locking it: every get pinned and
 * locked the root and a node of the level below, and concurrent readers on
 * other CPUs kept taking those descriptors and locks from each other.
 *
 * Why a copy of any age is safe: to a descent it is the node read by a
 * reader that was then delayed, which B-link descents tolerate already (one
 * lock at a time, nothing trusted but the page in hand).  Leaves are always
 * read live, under their share lock, and a leaf decides alone whether it
 * holds the key: a key below its low fence (or a free page, or a page of
 * another level) restarts the descent from the meta page with no copies,
 * and one at or past its high fence moves right along the live level.
 * Every state a copy can hold was the node's while its share lock was held,
 * so never part of a batch in progress (or undone).  The copies are dropped
 * at attach: after a crash restart they may name pages that recovery never
 * rebuilt.
 *
 * Freshness only: a copy is dropped when the page it led to was not the one
 * for the key (a move right or a restart: its downlinks no longer match the
 * level below) or when it does not cover the key, and retaken by the next
 * descent that reads the node itself; a restart retakes every copy on its
 * path.
 */
struct kv_node_copy {
	wr_relid rel; /* the tree's relation */
	wr_blkno blk; /* WR_INVALID_BLKNO: empty */
	int level;
	/*
	 * A search aid built with the copy, private like it: each separator's
	 * 8 bytes after the prefix all separators share, as a big-endian
	 * integer.  A search compares integers in this small array and keys
	 * only where heads tie; the keys lay scattered over 8 KiB, a call and
	 * likely a miss per probe.  nheads < 0: no aid (out of memory).
	 */
	int nheads, heads_cap;
	uint16_t plen;
	uint16_t found; /* level 1: times found since taken (saturating) */
	uint64_t *heads;
	/* Per child (slot - KV_FIRST_SLOT), the buffer an optimistic get last
	 * found it in (0: none): a guess that spares the buffer hint lookup,
	 * checked against the buffer's tag like the hints. */
	int32_t *bufs;
	char page[WR_PAGE_SIZE];
};
typedef kv_node_copy node_copy;
#define node_copies (kv_me->copies)

/* @p's bytes [off, off + 8) zero-padded, as a big-endian integer: for keys
 * sharing their first @off bytes, a smaller head means a smaller key. */
static uint64_t key_head(const char *p, size_t len, size_t off)
{
	unsigned char b[8] = {0};
	if (len > off)
		memcpy(b, p + off, WR_MIN(len - off, sizeof(b)));
	uint64_t h = 0;
	for (size_t i = 0; i < sizeof(b); i++)
		h = h << 8 | b[i];
	return h;
}

static void copy_build_heads(node_copy *c)
{
	int n = kvp_nslots(c->page) - KV_FIRST_SLOT - 1; /* separators */
	c->nheads = -1;
	if (n < 0)
		return;
	if (n > c->heads_cap || c->bufs == NULL) {
		int cap = WR_MAX(n, 1);
		uint64_t *h = realloc(c->heads, (size_t)cap * sizeof(*h));
		if (h == NULL)
			return;
		c->heads = h;
		int32_t *b = realloc(c->bufs, (size_t)(cap + 1) * sizeof(*b));
		if (b == NULL)
			return;
		c->bufs = b;
		c->heads_cap = cap;
	}
	memset(c->bufs, 0, (size_t)(n + 1) * sizeof(*c->bufs));
	c->plen = 0;
	if (n > 0) {
		kv_key f = kvn_inner_key(c->page, KV_FIRST_SLOT + 1);
		kv_key l = kvn_inner_key(c->page, KV_FIRST_SLOT + n);
		while (c->plen < f.len && c->plen < l.len && f.p[c->plen] == l.p[c->plen])
			c->plen++;
	}
	for (int i = 0; i < n; i++) {
		kv_key e = kvn_inner_key(c->page, KV_FIRST_SLOT + 1 + i);
		c->heads[i] = key_head(e.p, e.len, c->plen);
	}
	c->nheads = n;
}

/* First index of heads[lo, hi) above @h (@or_equal: at or above). */
static int heads_bound(const uint64_t *heads, int lo, int hi, uint64_t h, bool or_equal)
{
	while (lo < hi) {
		int mid = lo + (hi - lo) / 2;
		if (heads[mid] < h || (!or_equal && heads[mid] == h))
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* kvn_child_slot on a copy, through its heads. */
static int copy_child_slot(const node_copy *c, const kv_key *k, bool before)
{
	int n = c->nheads;
	if (n < 0)
		return kvn_child_slot(c->page, k, before);
	if (k->inf)
		return KV_FIRST_SLOT + n;
	if (n == 0)
		return KV_FIRST_SLOT;
	/* Every separator starts with the first one's plen bytes: a key that
	 * does not lies below or above them all. */
	kv_key f = kvn_inner_key(c->page, KV_FIRST_SLOT + 1);
	int pc = memcmp(k->p, f.p, WR_MIN(k->len, c->plen));
	if (pc == 0 && k->len < c->plen)
		pc = -1;
	if (pc != 0)
		return pc < 0 ? KV_FIRST_SLOT : KV_FIRST_SLOT + n;
	uint64_t h = key_head(k->p, k->len, c->plen);
	int lo = heads_bound(c->heads, 0, n, h, true);   /* [0, lo): below k */
	int hi = heads_bound(c->heads, lo, n, h, false); /* [hi, n): above k */
	/* Ties: the first separator in [lo, hi) above k (at or above, @before). */
	while (lo < hi) {
		int mid = lo + (hi - lo) / 2;
		kv_key e = kvn_inner_key(c->page, KV_FIRST_SLOT + 1 + mid);
		int cmp = kv_cmp(e.p, e.len, k->p, k->len);
		if (cmp < 0 || (cmp == 0 && !before))
			lo = mid + 1;
		else
			hi = mid;
	}
	return KV_FIRST_SLOT + lo;
}

/*
 * The copies live in KV_NODE_COPIES places found through a hash index by
 * block number (linear probing, at most half full), and a clock picks the
 * place a new copy takes.  Sets by block number modulo the places were
 * tried first: a sequential load allocates a level-1 node every fanout + 1
 * blocks, and at a stride such as 340 four or five of them shared a two-way
 * set, so a 10M-key tree (406 internal nodes for 512 places) retook copies
 * on most gets.  Here any internal nodes up to
 * KV_NODE_COPIES keep their copies, whatever their block numbers.
 */
#define COPY_INDEX_SIZE (1u << KV_COPY_INDEX_BITS)
_Static_assert(COPY_INDEX_SIZE >= 2 * KV_NODE_COPIES, "the copy index must stay half empty");

static void copies_reset(void)
{
	for (int i = 0; i < KV_NODE_COPIES; i++)
		if (node_copies[i] != NULL)
			node_copies[i]->blk = WR_INVALID_BLKNO;
	memset(kv_me->copy_index, 0, sizeof(kv_me->copy_index));
	memset(kv_me->copy_used, 0, sizeof(kv_me->copy_used));
	kv_me->l1_evicted = kv_me->l1_evicted_found = kv_me->l1_reads = 0;
	kv_me->l1_rationed = false;
}

/* Fibonacci hashing: blocks at any regular stride spread over the index
 * (a key space's tree: its relation shifts them). */
static uint32_t copy_hash(wr_relid rel, wr_blkno blk)
{
	return (uint32_t)((blk + (rel - KV_REL) * 40503u) * 2654435761u) >>
	       (32 - KV_COPY_INDEX_BITS);
}

/* The index position holding the current tree's @blk's copy number + 1, or
 * the empty one ending its probe. */
static uint32_t copy_probe(wr_blkno blk)
{
	const uint16_t *ix = kv_me->copy_index;
	wr_relid rel = kv_cur_rel;
	uint32_t h = copy_hash(rel, blk);
	while (ix[h] != 0 &&
	       (node_copies[ix[h] - 1]->blk != blk || node_copies[ix[h] - 1]->rel != rel))
		h = (h + 1) & (COPY_INDEX_SIZE - 1);
	return h;
}

static const node_copy *copy_find(wr_blkno blk, int level)
{
	uint16_t c = kv_me->copy_index[copy_probe(blk)];
	if (c == 0)
		return NULL;
	kv_me->copy_used[c - 1] = 1;
	node_copy *copy = node_copies[c - 1];
	if (copy->level != level)
		return NULL;
	if (level == 1) /* only level-1 copies are judged (copy_judge_eviction) */
		copy->found += copy->found < UINT16_MAX;
	return copy;
}

/* Empties index position @hole (and the copy it names): the entries after
 * it in its probe run move back, so every probe still ends at an empty slot. */
static void copy_drop_at(uint32_t hole)
{
	uint16_t *ix = kv_me->copy_index;
	if (ix[hole] == 0)
		return;
	node_copies[ix[hole] - 1]->blk = WR_INVALID_BLKNO;
	ix[hole] = 0;
	for (uint32_t i = (hole + 1) & (COPY_INDEX_SIZE - 1); ix[i] != 0;
	     i = (i + 1) & (COPY_INDEX_SIZE - 1)) {
		const node_copy *c = node_copies[ix[i] - 1];
		uint32_t home = copy_hash(c->rel, c->blk);
		/* Stays when its home lies cyclically in (hole, i]. */
		if (((i - home) & (COPY_INDEX_SIZE - 1)) < ((i - hole) & (COPY_INDEX_SIZE - 1)))
			continue;
		ix[hole] = ix[i];
		ix[i] = 0;
		hole = i;
	}
}

static void copy_drop(wr_blkno blk)
{
	copy_drop_at(copy_probe(blk));
}

/* The index position of copy @i (in the index). */
static uint32_t copy_pos(int i)
{
	const uint16_t *ix = kv_me->copy_index;
	uint32_t h = copy_hash(node_copies[i]->rel, node_copies[i]->blk);
	while (ix[h] != (uint16_t)(i + 1))
		h = (h + 1) & (COPY_INDEX_SIZE - 1);
	return h;
}

#ifdef WALRUS_TEST_HOOKS
static _Atomic int copy_places = KV_NODE_COPIES;

void kv_test_copy_places(int n)
{
	atomic_store(&copy_places, WR_MAX(1, WR_MIN(n, KV_NODE_COPIES)));
}
#define COPY_PLACES() atomic_load_explicit(&copy_places, memory_order_relaxed)
#else
#define COPY_PLACES() KV_NODE_COPIES
#endif

/*
 * Copies of level-1 nodes pay only when found again before the clock gives
 * their place away.  Above level 1 there are few nodes, and every descent
 * passes one of each level; level-1 nodes number the tree's leaves over
 * the fanout, and past the places a backend has (a 40M-key tree has some
 * 1 600 for 512 places) descents of random keys took a copy (a page copy
 * and its search aid, some 3 µs) on most gets and seldom found it again.
 * So every L1_WINDOW level-1 copies the clock evicts judge the next: found
 * fewer than twice each on average, a descent takes a copy of a level-1
 * node at one read in L1_SAMPLE (copy_worth_taking).  A tree whose
 * internal nodes fit evicts nothing and is never rationed; a working set
 * that shrinks gets its copies back through the samples.
 */
#define L1_WINDOW 256
#define L1_SAMPLE 16

static void copy_judge_eviction(const node_copy *c)
{
	kv_backend *me = kv_me;
	if (c->level != 1)
		return;
	me->l1_evicted_found += c->found;
	if (++me->l1_evicted < L1_WINDOW)
		return;
	me->l1_rationed = me->l1_evicted_found < 2 * me->l1_evicted;
	me->l1_evicted = me->l1_evicted_found = 0;
}

static bool copy_worth_taking(int level)
{
	kv_backend *me = kv_me;
	if (level != 1 || !me->l1_rationed || ++me->l1_reads >= L1_SAMPLE) {
		me->l1_reads = 0;
		return true;
	}
	atomic_fetch_add_explicit(&kv_sh->gets[me->get_stripe].copies_rationed, 1,
	                          memory_order_relaxed);
	return false;
}

/* A place for a new copy: an empty one, else the first the clock finds not
 * used since its last pass (whose copy is dropped). */
static int copy_victim(void)
{
	for (;;) {
		int i = kv_me->copy_hand % COPY_PLACES();
		kv_me->copy_hand = (uint16_t)((i + 1) % COPY_PLACES());
		node_copy *c = node_copies[i];
		if (c == NULL || c->blk == WR_INVALID_BLKNO)
			return i;
		if (!kv_me->copy_used[i]) {
			copy_judge_eviction(c);
			copy_drop_at(copy_pos(i));
			return i;
		}
		kv_me->copy_used[i] = 0;
	}
}

/* Out of memory only means no copy: the node is read under its lock. */
static void copy_take(wr_blkno blk, int level, const char *page)
{
	uint32_t pos = copy_probe(blk);
	int i = kv_me->copy_index[pos] != 0 ? kv_me->copy_index[pos] - 1 : copy_victim();
	node_copy **slot = &node_copies[i];
	if (*slot == NULL && (*slot = calloc(1, sizeof(node_copy))) == NULL)
		return;
	if (kv_me->copy_index[pos] == 0) /* copy_victim may have moved entries */
		kv_me->copy_index[copy_probe(blk)] = (uint16_t)(i + 1);
	memcpy((*slot)->page, page, WR_PAGE_SIZE);
	(*slot)->rel = kv_cur_rel;
	(*slot)->blk = blk;
	(*slot)->level = level;
	(*slot)->found = 0;
	kv_me->copy_used[i] = 1;
	copy_build_heads(*slot);
	atomic_fetch_add_explicit(&kv_sh->gets[kv_me->get_stripe].copies, 1, memory_order_relaxed);
}

int kv_shmem_init(void)
{
	copies_reset();
	kv_default.get_stripe = (unsigned)getpid() % KV_GET_STRIPES;
	kv_sh = shm_alloc("kv", sizeof(kv_shared));
	if (kv_sh == NULL)
		return wr_error(WALRUS_ENOMEM, "no room for region \"kv\" in shared memory");
	rw_init(&kv_sh->tree_lock);
	atomic_store(&KV_TREE_MAIN->rel, KV_REL);
	return WALRUS_OK;
}

/* ---------------------------------------------------------------- trees' slots */

static uint32_t tree_home(wr_relid rel)
{
	return 1 + (uint32_t)(rel * 2654435761u) % (KV_TREE_SLOTS - 1);
}

static kv_tree_sh *tree_find(wr_relid rel)
{
	if (rel == KV_REL)
		return KV_TREE_MAIN;
	for (uint32_t i = 0, h = tree_home(rel); i < KV_TREE_SLOTS - 1; i++) {
		kv_tree_sh *t = &kv_sh->trees[1 + (h - 1 + i) % (KV_TREE_SLOTS - 1)];
		if (atomic_load_explicit(&t->rel, memory_order_relaxed) == rel)
			return t;
	}
	return NULL;
}

/* A slot for another tree: the home slot when free, else the first the
 * clock finds not used since its last pass.  Tree lock held exclusive. */
static kv_tree_sh *tree_victim(wr_relid rel)
{
	kv_tree_sh *t = &kv_sh->trees[tree_home(rel)];
	while (atomic_load(&t->rel) != 0) {
		uint32_t i = 1 + atomic_fetch_add(&kv_sh->tree_clock, 1) % (KV_TREE_SLOTS - 1);
		t = &kv_sh->trees[i];
		if (!t->used)
			break;
		t->used = false;
	}
	return t;
}

kv_tree_sh *kv_tree_claim_other(void)
{
	wr_relid rel = kv_cur_rel;
	kv_tree_sh *t = tree_find(rel);
	if (t != NULL) {
		t->used = true;
		return t;
	}
	t = tree_victim(rel);
	/* Readers check seq around their read of root_hint: odd, or changed,
	 * and they read the meta page instead. */
	atomic_fetch_add(&t->seq, 1);
	atomic_store(&t->rel, rel);
	atomic_store(&t->root_hint, 0);
	t->file_blocks = 0;
	t->holes_known = t->holes = false;
	t->rightmost_leaf = 0;
	t->used = true;
	atomic_fetch_add(&t->seq, 1);
	return t;
}

uint64_t kv_tree_hint_other(void)
{
	wr_relid rel = kv_cur_rel;
	kv_tree_sh *t = tree_find(rel);
	if (t == NULL)
		return 0;
	uint32_t seq = atomic_load(&t->seq);
	uint64_t h = atomic_load(&t->root_hint);
	if ((seq & 1) || atomic_load(&t->rel) != rel || atomic_load(&t->seq) != seq)
		return 0;
	return h;
}

void kv_set_mapped_reads(bool on)
{
	kv_sh->mapped_reads = on;
}

int kv_attach(void)
{
	copies_reset();
	kv_default.get_stripe = (unsigned)getpid() % KV_GET_STRIPES;
	kv_sh = shm_lookup("kv", NULL);
	if (kv_sh == NULL)
		return wr_error(WALRUS_EPROTO, "shared memory has no \"kv\" region");
	return kv_mvcc_attach();
}

kv_backend *kv_backend_new(void)
{
	kv_backend *b = calloc(1, sizeof(*b));
	if (b == NULL) {
		wr_error(WALRUS_ENOMEM, "out of memory for a backend of the tree");
		return NULL;
	}
	b->get_stripe =
	    (unsigned)(getpid() + atomic_fetch_add(&kv_next_stripe, 1)) % KV_GET_STRIPES;
	return b;
}

void kv_backend_free(kv_backend *b)
{
	if (b == NULL || b == &kv_default)
		return;
	if (kv_me == b)
		kv_me = &kv_default;
	kvw_state_free(&b->w);
	for (int i = 0; i < KV_NODE_COPIES; i++) {
		if (b->copies[i] != NULL) {
			free(b->copies[i]->heads);
			free(b->copies[i]->bufs);
		}
		free(b->copies[i]);
	}
	free(b);
}

void kv_backend_set(kv_backend *b)
{
	kv_me = b != NULL ? b : &kv_default;
}

int kv_check_key(size_t kl)
{
	if (kl == 0)
		return wr_error(WALRUS_EINVAL, "key must not be empty");
	if (kl > KV_MAX_KEY)
		return wr_error(WALRUS_ETOOBIG, "key of %zu bytes is over the limit of %u bytes",
		                kl, KV_MAX_KEY);
	return WALRUS_OK;
}

/* ---------------------------------------------------------------- descent */

int kv_read_meta(kv_meta *m)
{
	int buf;
	int rc = buf_read(kv_cur_rel, 0, &buf);
	if (rc != WALRUS_OK)
		return rc;
	buf_lock(buf, false);
	const char *page = buf_page(buf);
	bool ok = kvp_type(page) == KV_PT_META;
	*m = kvm_get(page);
	buf_unlock(buf);
	buf_release(buf);
	if (!ok || m->magic != KV_META_MAGIC || m->height == 0 || m->height > KV_MAX_HEIGHT)
		return wr_error(WALRUS_ECORRUPT, "block 0 of relation %u is not a valid meta page",
		                kv_cur_rel);
	return WALRUS_OK;
}

/*
 * Where a descent starts: the root hint, or the meta page.  A reader only
 * fills an empty hint (compare-and-swap from 0): the writer publishes every
 * root change before it unlocks the pages of its batch, so a reader can
 * never put back a root older than the writer's.
 */
static int start_point(bool use_meta, wr_blkno *blk, int *level)
{
	uint64_t h = use_meta ? 0 : kv_tree_hint();
	if (h == 0) {
		kv_meta m;
		int rc = kv_read_meta(&m);
		if (rc != WALRUS_OK)
			return rc;
		h = kv_hint_make(m.root, m.height);
		/* Only KV_REL's slot is never handed to another tree: the others'
		 * hints are the writer's to set (kv_tree_claim's caller). */
		uint64_t zero = 0;
		if (kv_cur_rel == KV_REL)
			atomic_compare_exchange_strong(&KV_TREE_MAIN->root_hint, &zero, h);
	}
	*blk = (wr_blkno)h;
	*level = (int)(h >> 32) - 1;
	return WALRUS_OK;
}

enum { AT_HERE, AT_RIGHT, AT_RESTART };

static bool below_low(const kv_key *low, const kv_key *k, int mode)
{
	if (low->inf)
		return false;
	if (mode == KV_SEEK_GE)
		return k->inf || kv_cmp(k->p, k->len, low->p, low->len) < 0;
	return !k->inf && kv_cmp(k->p, k->len, low->p, low->len) <= 0;
}

static bool past_high(const kv_key *high, const kv_key *k, int mode)
{
	if (high->inf)
		return false;
	if (mode == KV_SEEK_GE)
		return !k->inf && kv_cmp(k->p, k->len, high->p, high->len) >= 0;
	return k->inf || kv_cmp(k->p, k->len, high->p, high->len) > 0;
}

/*
 * Whether @page is the node of @level covering @k, lies left of it, or is not
 * usable.  Only the header is checked (kvp_sane_header), not every line
 * pointer: that loop cost a third of a get, and the accessors clamp what
 * they read.
 */
static int locate(const char *page, int level, const kv_key *k, int mode)
{
	if (kvp_type(page) != KV_PT_NODE || !kvp_sane_header(page) ||
	    kvp_nslots(page) < KV_FIRST_SLOT)
		return AT_RESTART;
	kv_special s = kvp_special(page);
	if (s.level != level || (level > 0 && kvn_nentries(page) == 0))
		return AT_RESTART;
	kv_key low = kvn_low(page), high = kvn_high(page);
	if (below_low(&low, k, mode))
		return AT_RESTART;
	if (past_high(&high, k, mode))
		return s.right == WR_INVALID_BLKNO ? AT_RESTART : AT_RIGHT;
	return AT_HERE;
}

static wr_blkno pick_child(const char *page, const kv_key *k, int mode)
{
	if (mode == KV_SEEK_GE && k->inf)
		return kvn_child(page, KV_FIRST_SLOT);
	return kvn_child(page, kvn_child_slot(page, k, mode == KV_SEEK_LT));
}

static wr_blkno copy_pick_child(const node_copy *c, const kv_key *k, int mode)
{
	if (mode == KV_SEEK_GE && k->inf)
		return kvn_child(c->page, KV_FIRST_SLOT);
	return kvn_child(c->page, copy_child_slot(c, k, mode == KV_SEEK_LT));
}

/*
 * The child of internal node @blk (at @level) for @k from this process's copy
 * of it, or WR_INVALID_BLKNO when there is no copy or it does not cover @k
 * (then the copy is dropped and the node read).
 */
static wr_blkno child_from_copy(wr_blkno blk, int level, const kv_key *k, int mode)
{
	const node_copy *c = copy_find(blk, level);
	if (c == NULL)
		return WR_INVALID_BLKNO;
	wr_blkno child = locate(c->page, level, k, mode) == AT_HERE ? copy_pick_child(c, k, mode)
	                                                            : WR_INVALID_BLKNO;
	if (child == WR_INVALID_BLKNO)
		copy_drop(blk);
	return child;
}

/* Whether the leaves from (forward) or below (backward) @edge lie past @until. */
static bool plan_past(const kv_key *edge, const kv_key *until, bool fwd)
{
	if (until == NULL || edge->inf)
		return edge->inf;
	int c = kv_cmp(edge->p, edge->len, until->p, until->len);
	return fwd ? c >= 0 : c <= 0;
}

/*
 * The plan of a scan (kv_plan_leaves) from level-1 node @page, which covers
 * @k: its children from the one for @k on, in the scan's direction, up to
 * the plan's bound, and the key where the leaves after them start (the
 * next child's low key forward, the last one's backward; at the node's
 * end, its fence on that side).
 */
static void plan_from(const char *page, const kv_key *k, int mode, kv_leaf_plan *p)
{
	bool fwd = mode == KV_SEEK_GE;
	int last = kvp_nslots(page) - 1;
	int s = fwd && k->inf ? KV_FIRST_SLOT : kvn_child_slot(page, k, !fwd);
	kv_key edge = {.inf = true};
	p->n = 0;
	while (p->n < p->cap && s >= KV_FIRST_SLOT && s <= last) {
		wr_blkno c = kvn_child(page, s);
		if (c == WR_INVALID_BLKNO)
			break;
		p->blk[p->n++] = c;
		s += fwd ? 1 : -1;
		edge = fwd ? (s <= last ? kvn_inner_key(page, s) : kvn_high(page))
		           : (s >= KV_FIRST_SLOT ? kvn_inner_key(page, s + 1) : kvn_low(page));
		if (plan_past(&edge, p->until, fwd))
			break;
	}
	p->more = p->n > 0 && !plan_past(&edge, p->until, fwd) && edge.len <= KV_MAX_KEY;
	p->next_len = p->more ? edge.len : 0;
	if (p->more && edge.len > 0)
		memcpy(p->next, edge.p, edge.len);
}

/*
 * One try from the root; KV_RETRY when the tree changed under us.  A retry
 * (@use_meta) reads every node itself.  With @plan, the descent stops at
 * level 1 and plans from the node there (this backend's copy of it, when it
 * has one that covers @k) instead of returning a leaf.
 */
static int descend_once(const kv_key *k, int mode, bool use_meta, kv_rpage *out, kv_leaf_plan *plan)
{
	wr_blkno blk, via = WR_INVALID_BLKNO; /* the copy that led to blk */
	int level, moves = 0;
	int stop = plan != NULL ? 1 : 0;
	int rc = start_point(use_meta, &blk, &level);
	if (rc == WALRUS_OK && level < stop) {
		plan->n = 0; /* one leaf: nothing ahead */
		plan->more = false;
		return WALRUS_OK;
	}
	while (rc == WALRUS_OK) {
		const node_copy *c =
		    stop > 0 && level == stop && !use_meta ? copy_find(blk, level) : NULL;
		if (c != NULL) {
			if (locate(c->page, level, k, mode) == AT_HERE) {
				plan_from(c->page, k, mode, plan);
				return WALRUS_OK;
			}
			copy_drop(blk);
		}
		wr_blkno child = use_meta || level <= stop ? WR_INVALID_BLKNO
		                                           : child_from_copy(blk, level, k, mode);
		if (child != WR_INVALID_BLKNO) {
			via = blk;
			blk = child;
			level--;
			continue;
		}
		int buf;
		rc = buf_read(kv_cur_rel, blk, &buf);
		if (rc != WALRUS_OK)
			break;
		const char *page = buf_page(buf);
		/* The first line pointers (a leaf's all), while the lock is taken. */
		for (int off = 64; off <= 256; off += 64)
			__builtin_prefetch(page + off);
		buf_lock(buf, false);
		int where = locate(page, level, k, mode);
		if (where == AT_HERE && level == 0) {
			*out = (kv_rpage){.buf = buf, .blk = blk, .page = page};
			return WALRUS_OK;
		}
		if (where == AT_HERE && copy_worth_taking(level))
			copy_take(blk, level, page);
		if (where == AT_HERE && level == stop)
			plan_from(page, k, mode, plan);
		if (where != AT_HERE && via != WR_INVALID_BLKNO)
			copy_drop(via);
		via = WR_INVALID_BLKNO;
		wr_blkno next = where == AT_RIGHT  ? kvp_special(page).right
		                : where == AT_HERE ? pick_child(page, k, mode)
		                                   : WR_INVALID_BLKNO;
		buf_unlock(buf);
		buf_release(buf);
		if (where == AT_HERE && level == stop)
			return WALRUS_OK;
		/* No link to follow (a damaged entry or sibling link): start over. */
		if (where == AT_RESTART || next == WR_INVALID_BLKNO ||
		    (where == AT_RIGHT && ++moves > KV_MAX_MOVES))
			return KV_RETRY;
		if (where == AT_HERE)
			level--;
		blk = next;
	}
	return rc;
}

static int descend(const kv_key *k, int mode, kv_rpage *out, kv_leaf_plan *plan)
{
	for (int restarts = 0; restarts < KV_MAX_RESTARTS; restarts++) {
		if (restarts >= 8)
			sched_yield(); /* let the writer finish its batch */
		int rc = descend_once(k, mode, restarts > 0, out, plan);
		if (rc != KV_RETRY)
			return rc;
	}
	return wr_error(WALRUS_ECORRUPT,
	                "no stable path to a leaf of relation %u after %d restarts: the tree is "
	                "damaged (run verify)",
	                kv_cur_rel, KV_MAX_RESTARTS);
}

int kv_descend(const kv_key *k, int mode, kv_rpage *out)
{
	return descend(k, mode, out, NULL);
}

int kv_plan_leaves(const kv_key *k, int mode, kv_leaf_plan *plan)
{
	return descend(k, mode, NULL, plan);
}

void kv_rpage_done(kv_rpage *p)
{
	buf_unlock(p->buf);
	buf_release(p->buf);
	p->buf = BUF_INVALID;
	p->page = NULL;
}

/* ---------------------------------------------------------------- overflow reads */

/* Copies one page of the chain; false when it is not the expected piece. */
static bool ovf_piece(const char *page, const kv_ovf_ref *ref, uint32_t seq, uint32_t off,
                      char *dst, wr_blkno *next)
{
	if (kvp_type(page) != KV_PT_OVF)
		return false;
	kv_ovf_hdr h = kvo_header(page);
	if (h.id != ref->id || h.seq != seq || h.len == 0 || h.len > ref->vlen - off ||
	    h.len > KV_OVF_CHUNK)
		return false;
	memcpy(dst + off, kvo_data(page), h.len);
	*next = kvp_special(page).right;
	return true;
}

int kv_ovf_read(const kv_ovf_ref *ref, char *dst)
{
	uint32_t off = 0, seq = 0;
	wr_blkno blk = ref->first;
	while (off < ref->vlen) {
		int buf;
		if (blk == WR_INVALID_BLKNO)
			return KV_RETRY;
		int rc = buf_read(kv_cur_rel, blk, &buf);
		if (rc != WALRUS_OK)
			return rc;
		buf_lock(buf, false);
		const char *page = buf_page(buf);
		bool ok = ovf_piece(page, ref, seq, off, dst, &blk);
		if (ok)
			off += kvo_header(page).len;
		buf_unlock(buf);
		buf_release(buf);
		if (!ok)
			return KV_RETRY;
		seq++;
	}
	return WALRUS_OK;
}

/* ---------------------------------------------------------------- point lookups */

/* Where kv_get / kv_get_into put the value. */
typedef struct get_dst {
	char *buf; /* caller's buffer, or NULL to malloc */
	size_t cap;
	char *out; /* the value's bytes */
	size_t len;
	kv_leaf_hint *hint; /* where the leaf search ended, or NULL */
} get_dst;

static void note_hint(get_dst *d, wr_blkno leaf, const char *page, int slot, bool found)
{
	if (d->hint != NULL)
		*d->hint = (kv_leaf_hint){
		    .lsn = page_get_lsn(page), .blk = leaf, .slot = (uint16_t)slot, .found = found};
}

static int dst_prepare(get_dst *d, size_t len)
{
	d->len = len;
	if (d->buf != NULL) {
		if (len > d->cap)
			return wr_error(WALRUS_ETOOBIG,
			                "buffer too small: the value is %zu bytes, the buffer %zu",
			                len, d->cap);
		d->out = d->buf;
		return WALRUS_OK;
	}
	d->out = malloc(len > 0 ? len : 1);
	if (d->out == NULL)
		return wr_error(WALRUS_ENOMEM, "out of memory for a value of %zu bytes", len);
	return WALRUS_OK;
}

static void dst_discard(get_dst *d)
{
	if (d->buf == NULL)
		free(d->out);
	d->out = NULL;
}

/* One try: the leaf entry, then the value (inline under the lock, overflow after it). */
static int lookup_once(const void *k, size_t kl, get_dst *d)
{
	kv_rpage p = {0};
	kv_key key = {.p = k, .len = (uint16_t)kl};
	int rc = kv_descend(&key, KV_SEEK_GE, &p);
	if (rc != WALRUS_OK)
		return rc;
	bool eq;
	int slot = kvn_lower_bound(p.page, k, kl, &eq);
	note_hint(d, p.blk, p.page, slot, eq);
	kv_leaf_ent e = {0};
	uint16_t len;
	const char *item = eq ? kvp_item(p.page, slot, &len) : NULL;
	if (!eq)
		rc = wr_error(WALRUS_ENOTFOUND, "key not found");
	else if (!kvl_decode(item, len, &e))
		rc = wr_error(WALRUS_ECORRUPT,
		              "bad leaf entry at slot %d of block %u of relation %u", slot, p.blk,
		              kv_cur_rel);
	else
		rc = dst_prepare(d, e.vlen);
	if (rc == WALRUS_OK && e.kind == KV_INLINE && e.vlen > 0)
		memcpy(d->out, e.val, e.vlen);
	kv_rpage_done(&p);
	if (rc != WALRUS_OK || e.kind == KV_INLINE)
		return rc;
	rc = kv_ovf_read(&e.ref, d->out);
	if (rc != WALRUS_OK)
		dst_discard(d);
	return rc;
}

/* ---------------------------------------------------------------- optimistic lookups */

/*
 * The leaf for @k by this backend's copies of the internal nodes alone, or
 * WR_INVALID_BLKNO when a level has no copy.  The copies' fences are not
 * checked: only the leaf's decide (peek_leaf), and a copy that led to a leaf
 * not covering @k sends the get down the locked path, which checks them and
 * drops that copy.
 */
static wr_blkno leaf_from_copies(const kv_key *k, int32_t **guess)
{
	uint64_t h = kv_tree_hint();
	*guess = NULL;
	if (h == 0)
		return WR_INVALID_BLKNO;
	wr_blkno blk = (wr_blkno)h;
	for (int level = (int)(h >> 32) - 1; level > 0 && blk != WR_INVALID_BLKNO; level--) {
		const node_copy *c = copy_find(blk, level);
		if (c == NULL)
			return WR_INVALID_BLKNO;
		int slot = copy_child_slot(c, k, false);
		blk = kvn_child(c->page, slot);
		*guess = c->nheads >= 0 ? &c->bufs[slot - KV_FIRST_SLOT] : NULL;
	}
	return blk;
}

/* What a peek at a leaf found: usable when the leaf covers the key and the
 * entry is absent or inline (an overflow value is read under locks). */
typedef struct leaf_peek {
	const kv_key *key;
	char *out; /* KV_LEAF_ITEM_MAX bytes */
	bool usable, found;
	uint32_t vlen;
	int slot;
	wr_lsn lsn;
} leaf_peek;

/*
 * Runs inside buf_peek on a leaf no lock protects: what it reads may be torn
 * and is used only if the peek says nothing changed.  Every offset it takes
 * from the page is clamped to the page: the slot count by kvn_lower_bound,
 * the items by kvp_item, the keys by kvn_leaf_key.
 */
static void peek_leaf(const char *page, void *arg)
{
	leaf_peek *p = arg;
	p->usable = false;
	if (locate(page, 0, p->key, KV_SEEK_GE) != AT_HERE)
		return;
	int slot = p->slot = kvn_lower_bound(page, p->key->p, p->key->len, &p->found);
	p->lsn = page_get_lsn(page);
	kv_leaf_ent e;
	uint16_t len;
	const char *item = p->found ? kvp_item(page, slot, &len) : NULL;
	if (p->found &&
	    (!kvl_decode(item, len, &e) || e.kind != KV_INLINE || e.vlen > KV_LEAF_ITEM_MAX))
		return;
	if (p->found) {
		memcpy(p->out, e.val, e.vlen);
		p->vlen = e.vlen;
	}
	p->usable = true;
}

#ifdef WALRUS_TEST_HOOKS
static void (*mapped_between_fn)(void *);
static void *mapped_between_arg;

void kv_test_mapped_between(void (*fn)(void *), void *arg)
{
	mapped_between_fn = fn;
	mapped_between_arg = arg;
}
#endif

typedef struct mapped_peek {
	leaf_peek *p;
	wr_blkno leaf;
	bool ok;
} mapped_peek;

/*
 * Whether mapped leaves come from the device: then each is prefetched whole
 * (smgr_map_prefetch), since the mapping faults in one system page at a
 * time and a leaf would cost two device reads in a row; from the page
 * cache, the prefetch's system call would be a third of the get.  A peek
 * that took KV_MAP_SLOW_NS waited for the device: the next KV_MAP_SLOW_RUN
 * peeks prefetch, and each of them that waits again starts the run over.
 * Otherwise one peek in KV_MAP_TIME_EVERY is timed (two clock reads), so a
 * get from memory pays almost nothing for the judging.
 */
#define KV_MAP_SLOW_NS    10000u
#define KV_MAP_SLOW_RUN   16u
#define KV_MAP_TIME_EVERY 8u

#ifdef WALRUS_TEST_HOOKS
static int map_judge = -1;

void kv_test_map_judge(int mode)
{
	map_judge = mode;
}
#endif

static bool map_timed(void)
{
	return kv_me->map_slow > 0 || ++kv_me->map_peeks % KV_MAP_TIME_EVERY == 0;
}

static void map_judge_peek(uint64_t ns)
{
	bool slow = ns >= KV_MAP_SLOW_NS;
#ifdef WALRUS_TEST_HOOKS
	if (map_judge >= 0)
		slow = map_judge > 0;
#endif
	if (slow)
		kv_me->map_slow = KV_MAP_SLOW_RUN;
	else if (kv_me->map_slow > 0)
		kv_me->map_slow--;
}

/* Abandoned at a load that faults (smgr_map_read): it locks and allocates nothing. */
static void peek_mapped_page(const char *page, void *arg)
{
	mapped_peek *m = arg;
	m->ok = page_verify(page, m->leaf);
	if (m->ok)
		peek_leaf(page, m->p);
}

/*
 * A leaf the pool does not hold, peeked at through the mapping of the data
 * file (option mmap_reads): it saves the pread and the copy into a buffer,
 * and the eviction that would make room.  Its file copy is the latest only
 * while no buffer holds it (buf_absent), and whole only if no buffer took it
 * during the read (buf_absent_still); the checksum is verified as a read
 * into the pool would.  BUF_PEEK_NONE when it cannot answer.
 */
static int peek_mapped(wr_blkno leaf, leaf_peek *p)
{
	uint32_t ticket;
	/* KV_REL's file only: mappings stay until the process ends, and key
	 * spaces may be many. */
	if (!kv_sh->mapped_reads || kv_cur_rel != KV_REL || !buf_absent(kv_cur_rel, leaf, &ticket))
		return BUF_PEEK_NONE;
	const char *page = smgr_map_block(kv_cur_rel, leaf);
	if (page == NULL)
		return BUF_PEEK_NONE;
	mapped_peek m = {.p = p, .leaf = leaf};
	bool timed = map_timed();
	if (kv_me->map_slow > 0) {
		smgr_map_prefetch(page);
		atomic_fetch_add_explicit(&kv_sh->gets[kv_me->get_stripe].mapped_prefetches, 1,
		                          memory_order_relaxed);
	}
	uint64_t t0 = timed ? wr_now_ns() : 0;
	if (!smgr_map_read(kv_cur_rel, leaf, page, peek_mapped_page, &m))
		return BUF_PEEK_NONE; /* the locked path reads it and reports the error */
	if (timed)
		map_judge_peek(wr_now_ns() - t0);
	bool ok = m.ok;
#ifdef WALRUS_TEST_HOOKS
	if (mapped_between_fn != NULL)
		mapped_between_fn(mapped_between_arg);
#endif
	if (!buf_absent_still(kv_cur_rel, leaf, ticket)) {
		atomic_fetch_add_explicit(&kv_sh->gets[kv_me->get_stripe].mapped_retries, 1,
		                          memory_order_relaxed);
		return BUF_PEEK_CHANGED;
	}
	if (!ok)
		return BUF_PEEK_NONE; /* a damaged page: buf_read reports it */
	atomic_fetch_add_explicit(&kv_sh->gets[kv_me->get_stripe].mapped, 1, memory_order_relaxed);
	return BUF_PEEK_DONE;
}

/*
 * A get without a pin or a lock: the leaf through the copies of the nodes
 * above it, then a peek at it.  KV_RETRY when it cannot answer (no copies,
 * the leaf not where this backend last found it, a writer overlapping, the
 * key not covered by that leaf, an overflow value): the locked path does.
 */
static int lookup_optimistic(const void *k, size_t kl, get_dst *d)
{
	kv_key key = {.p = k, .len = (uint16_t)kl};
	int32_t *guess, none = 0;
	wr_blkno leaf = leaf_from_copies(&key, &guess);
	if (leaf == WR_INVALID_BLKNO)
		return KV_RETRY;
	char scratch[KV_LEAF_ITEM_MAX];
	leaf_peek p = {.key = &key, .out = scratch};
	int rc = buf_peek_at(kv_cur_rel, leaf, guess != NULL ? guess : &none, peek_leaf, &p);
	if (rc == BUF_PEEK_NONE)
		rc = peek_mapped(leaf, &p);
	if (rc == BUF_PEEK_CHANGED)
		atomic_fetch_add_explicit(&kv_sh->gets[kv_me->get_stripe].opt_retries, 1,
		                          memory_order_relaxed);
	if (rc != BUF_PEEK_DONE || !p.usable)
		return KV_RETRY;
	atomic_fetch_add_explicit(&kv_sh->gets[kv_me->get_stripe].optimistic, 1,
	                          memory_order_relaxed);
	if (d->hint != NULL)
		*d->hint = (kv_leaf_hint){
		    .lsn = p.lsn, .blk = leaf, .slot = (uint16_t)p.slot, .found = p.found};
	if (!p.found)
		return wr_error(WALRUS_ENOTFOUND, "key not found");
	rc = dst_prepare(d, p.vlen);
	if (rc == WALRUS_OK && p.vlen > 0)
		memcpy(d->out, scratch, p.vlen);
	return rc;
}

static int lookup(const void *k, size_t kl, get_dst *d)
{
	int rc = kv_check_key(kl);
	if (rc != WALRUS_OK)
		return rc;
	atomic_fetch_add_explicit(&kv_sh->gets[kv_me->get_stripe].n, 1, memory_order_relaxed);
	rc = lookup_optimistic(k, kl, d);
	if (rc != KV_RETRY)
		return rc;
	for (int tries = 0; tries < KV_MAX_RESTARTS; tries++) {
		rc = lookup_once(k, kl, d);
		if (rc != KV_RETRY)
			return rc;
		if (tries >= 8)
			sched_yield();
	}
	return wr_error(WALRUS_ECORRUPT,
	                "the overflow chain of a value never matched its leaf entry: the tree is "
	                "damaged (run verify)");
}

int kv_get(const void *k, size_t kl, void **v, size_t *vl)
{
	return kv_get_in(KV_REL, k, kl, v, vl);
}

int kv_get_into(const void *k, size_t kl, void *buf, size_t cap, size_t *vl)
{
	return kv_get_into_in(KV_REL, k, kl, buf, cap, vl);
}

int kv_get_in(wr_relid rel, const void *k, size_t kl, void **v, size_t *vl)
{
	return kv_get_hinted(rel, k, kl, v, NULL, 0, vl, NULL);
}

int kv_get_into_in(wr_relid rel, const void *k, size_t kl, void *buf, size_t cap, size_t *vl)
{
	return kv_get_hinted(rel, k, kl, NULL, buf, cap, vl, NULL);
}

int kv_get_hinted(wr_relid rel, const void *k, size_t kl, void **v, void *buf, size_t cap,
                  size_t *vl, kv_leaf_hint *hint)
{
	kv_cur_rel = rel;
	char dummy; /* cap 0: never written */
	get_dst d = {.hint = hint};
	if (v != NULL)
		*v = NULL;
	else
		d = (get_dst){
		    .buf = buf != NULL ? buf : &dummy, .cap = buf != NULL ? cap : 0, .hint = hint};
	if (hint != NULL)
		hint->blk = 0;
	int rc = lookup(k, kl, &d);
	*vl = d.len;
	if (rc == WALRUS_OK && v != NULL)
		*v = d.out;
	else if (v != NULL)
		*vl = 0;
	return rc;
}

/* ---------------------------------------------------------------- creation */

/* Block @blk of a relation of @n blocks, pinned and exclusively locked, to be rebuilt. */
static int new_block(wr_blkno blk, wr_blkno n, int *buf)
{
	if (blk < n)
		return buf_read_zero(KV_REL, blk, buf);
	wr_blkno got;
	int rc = buf_extend(KV_REL, buf, &got);
	if (rc == WALRUS_OK && got != blk) {
		buf_unlock(*buf);
		buf_release(*buf);
		return wr_error(WALRUS_EINTERNAL, "relation %u grew to block %u, expected %u",
		                KV_REL, got, blk);
	}
	return rc;
}

/* Rebuilds the page of @buf from @img as a logged op of block @id (no image needed). */
static void init_block(int id, int buf, const char *img, char *op)
{
	size_t ilen = kvop_image_size(img);
	uint16_t len = (uint16_t)ilen, zero = 0;
	op[0] = KVOP_INIT;
	memcpy(op + 1, &zero, 2);
	memcpy(op + 3, &len, 2);
	kvop_image(img, op + KVOP_HDR);
	char why[128];
	if (!kvop_apply(buf_page(buf), op, KVOP_HDR + ilen, why, sizeof(why)))
		wr_panic("could not build a new page of relation %u: %s", KV_REL, why);
	page_set_lsn(buf_page(buf), wal_insert_lsn() + 1); /* after the redo point: no image */
	buf_change_register(id, buf, WAL_BLK_WILL_INIT);
	buf_change_data(id, op, KVOP_HDR + ilen);
}

/* The meta page and an empty root leaf, in one record. */
/* Scratch of create_tree: the ops stay registered until the record is inserted. */
typedef struct create_scratch {
	char img[WR_PAGE_SIZE], op0[WR_PAGE_SIZE + KVOP_HDR], op1[WR_PAGE_SIZE + KVOP_HDR];
} create_scratch;

static int create_tree_with(wr_blkno n, create_scratch *cs)
{
	char *img = cs->img, *op0 = cs->op0, *op1 = cs->op1;
	int mbuf, rbuf;
	int rc = new_block(0, n, &mbuf);
	if (rc != WALRUS_OK)
		return rc;
	rc = new_block(1, n, &rbuf);
	if (rc != WALRUS_OK) {
		buf_unlock(mbuf);
		buf_release(mbuf);
		return rc;
	}
	kv_meta m = {.magic = KV_META_MAGIC,
	             .version = KV_META_VERSION,
	             .root = 1,
	             .height = 1,
	             .nblocks = 2,
	             .free_head = WR_INVALID_BLKNO,
	             .next_value_id = 1};
	kv_key inf = {.inf = true};
	buf_change_begin();
	kvm_init(img, &m);
	init_block(0, mbuf, img, op0);
	kvn_init(img, 0, 0, WR_INVALID_BLKNO, WR_INVALID_BLKNO, &inf, &inf);
	init_block(1, rbuf, img, op1);
	wr_lsn lsn = buf_change_insert(RM_KV, KV_INFO_CREATE | KV_FIRST);
	buf_change_end();
	buf_unlock(rbuf);
	buf_release(rbuf);
	buf_unlock(mbuf);
	buf_release(mbuf);
	wal_flush_to(lsn);
	atomic_store(&KV_TREE_MAIN->root_hint, kv_hint_make(m.root, m.height));
	wr_log(WR_LOG, "created the key-value tree in relation %u", KV_REL);
	return WALRUS_OK;
}

/* The scratch (24 KiB) is on the heap: the buffer calls below it go deep. */
static int create_tree(wr_blkno n)
{
	create_scratch *cs = malloc(sizeof(*cs));
	if (cs == NULL)
		return wr_error(WALRUS_ENOMEM, "out of memory creating the key-value tree");
	int rc = create_tree_with(n, cs);
	free(cs);
	return rc;
}

static int create_locked(void)
{
	smgr_rel *r;
	wr_blkno n;
	int rc = smgr_exists(KV_REL) ? WALRUS_OK : smgr_create(KV_REL);
	if (rc == WALRUS_OK)
		rc = smgr_open(KV_REL, &r);
	if (rc == WALRUS_OK)
		rc = smgr_nblocks(r, &n);
	if (rc != WALRUS_OK)
		return rc;
	if (n > 0) {
		int buf;
		rc = buf_read(KV_REL, 0, &buf);
		if (rc != WALRUS_OK)
			return rc;
		bool exists = kvp_type(buf_page(buf)) == KV_PT_META;
		buf_release(buf);
		/* A crash between extending the file and logging the meta page leaves
		 * blocks that are not a tree yet: build it over them. */
		if (exists)
			return WALRUS_OK;
	}
	return create_tree(n);
}

static int tree_missing(const char *what)
{
	return wr_error(WALRUS_ECORRUPT,
	                "data file \"base/%u\" of the key-value tree %s, but the tree was created "
	                "before the last checkpoint: restore the data directory from a backup",
	                (unsigned)KV_REL, what);
}

int kv_check_file(void)
{
	return smgr_exists(KV_REL) ? WALRUS_OK : tree_missing("is missing");
}

int kv_check_tree(void)
{
	kv_cur_rel = KV_REL;
	smgr_rel *r;
	wr_blkno n;
	int rc = smgr_open(KV_REL, &r);
	if (rc == WALRUS_OK)
		rc = smgr_nblocks(r, &n);
	if (rc != WALRUS_OK)
		return rc;
	if (n == 0)
		return tree_missing("is empty");
	int buf;
	rc = buf_read(KV_REL, 0, &buf);
	if (rc != WALRUS_OK)
		return rc;
	bool meta = kvp_type(buf_page(buf)) == KV_PT_META;
	buf_release(buf);
	return meta ? WALRUS_OK : tree_missing("has no meta page");
}

int kv_create_if_missing(void)
{
	kv_cur_rel = KV_REL;
	rw_lock_excl(&kv_sh->tree_lock);
	int rc = create_locked();
	rw_unlock(&kv_sh->tree_lock);
	return rc;
}

/* ---------------------------------------------------------------- statistics */

void kv_get_stats(kv_stats *s)
{
	memset(s, 0, sizeof(*s));
	if (kv_sh == NULL)
		return;
	for (int i = 0; i < KV_GET_STRIPES; i++) {
		s->gets += atomic_load(&kv_sh->gets[i].n);
		s->optimistic_reads += atomic_load(&kv_sh->gets[i].optimistic);
		s->optimistic_retries += atomic_load(&kv_sh->gets[i].opt_retries);
		s->mapped_reads += atomic_load(&kv_sh->gets[i].mapped);
		s->mapped_retries += atomic_load(&kv_sh->gets[i].mapped_retries);
		s->mapped_prefetches += atomic_load(&kv_sh->gets[i].mapped_prefetches);
		s->node_copies_taken += atomic_load(&kv_sh->gets[i].copies);
		s->node_copies_rationed += atomic_load(&kv_sh->gets[i].copies_rationed);
	}
	s->puts = atomic_load(&kv_sh->puts);
	s->deletes = atomic_load(&kv_sh->deletes);
	s->batches = atomic_load(&kv_sh->batches);
	s->batch_aborts = atomic_load(&kv_sh->aborts);
	s->splits = atomic_load(&kv_sh->splits);
	s->pages_freed = atomic_load(&kv_sh->pages_freed);
	s->pages_reused = atomic_load(&kv_sh->pages_reused);
	s->fastpath_hits = atomic_load(&kv_sh->fastpath_hits);
	s->hint_hits = atomic_load(&kv_sh->hint_hits);
	s->prefetch_batches = atomic_load(&kv_sh->prefetch_batches);
	s->prefetch_leaves = atomic_load(&kv_sh->prefetch_leaves);
	s->shifts = atomic_load(&kv_sh->shifts);
	s->file_grows = atomic_load(&kv_sh->file_grows);
	s->size_checks = atomic_load(&kv_sh->size_checks);
	s->compactions = atomic_load(&kv_sh->compactions);
	s->compact_leaves_merged = atomic_load(&kv_sh->compact_merged);
	s->compact_pages_moved = atomic_load(&kv_sh->compact_moved);
	s->compact_blocks_given_back = atomic_load(&kv_sh->compact_given_back);
	s->scan_ahead = atomic_load(&kv_sh->scan_ahead);
	s->scan_ahead_io = atomic_load(&kv_sh->scan_ahead_io);
	kv_meta m;
	kv_cur_rel = KV_REL;
	if (smgr_exists(KV_REL) && kv_read_meta(&m) == WALRUS_OK) {
		s->height = m.height;
		s->pages = m.nblocks;
		s->free_pages = m.nfree;
		s->keys = m.nkeys;
	} else {
		wr_error_clear();
	}
}
