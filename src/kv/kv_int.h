/*
 * kv_int.h - the tree's on-disk layout and the interfaces between the files
 * of src/kv (not for other modules).  See README.md for the invariants.
 *
 * Files: kv_page.c (slotted pages, node layout, page ops shared by the
 * writer and redo), kv_tree.c (region "kv", readers' descent, gets,
 * overflow reads, creation, stats), kv_write.c (the writer's pages, page
 * allocation and the record builder), kv_modify.c (put and delete: splits,
 * leaf removal, overflow chains), kv_batch.c (batches, commit, abort),
 * kv_compact.c (compaction), kv_iter.c, kv_redo.c, kv_verify.c.
 */
#ifndef WALRUS_KV_INT_H
#define WALRUS_KV_INT_H

#include <stdatomic.h>
#include <stddef.h>
#include <string.h>

#include "ipc/ipc.h"
#include "kv/kv.h"
#include "wal/wal.h"

/* ---------------------------------------------------------------- page layout */

/* wr_page_header.type of the tree's pages. */
enum kv_page_type {
	KV_PT_META = 0x4b, /* block 0 */
	KV_PT_NODE = 0x4c, /* leaf or internal node */
	KV_PT_OVF = 0x4d,  /* a piece of an overflow value */
	KV_PT_FREE = 0x4e, /* on the free list */
};

/* The special space at the end of every tree page (16 bytes). */
typedef struct kv_special {
	uint32_t left;   /* left sibling (nodes) */
	uint32_t right;  /* right sibling (nodes), next page (overflow chain, free list) */
	uint16_t level;  /* 0 = leaf */
	uint16_t flags;  /* KVN_* */
	uint16_t prefix; /* leaves: key bytes every entry leaves out (kvn_prefix); else 0 */
	uint16_t reserved;
} kv_special;

#define KVN_LOW_INF  0x0001 /* the low fence is minus infinity */
#define KVN_HIGH_INF 0x0002 /* the high fence is plus infinity */

#define KV_SPECIAL_OFF ((uint16_t)(WR_PAGE_SIZE - sizeof(kv_special)))
/* Bytes for line pointers and items on a node page. */
#define KV_NODE_SPACE (KV_SPECIAL_OFF - WR_PAGE_HEADER_SIZE) /* 8152 */

/* A line pointer: where an item lies on the page. */
typedef struct kv_lp {
	uint16_t off, len;
} kv_lp;
#define KV_LP_SIZE ((uint16_t)sizeof(kv_lp))

/*
 * Node items: slot 0 holds the low fence, slot 1 the high fence (empty when
 * infinite, see the flags), entries start at slot KV_FIRST_SLOT.
 *   leaf entry:     u16 klen, u8 kind, key, then the value (KV_INLINE) or a
 *                   kv_ovf_ref (KV_OVERFLOW); the key without the leaf's
 *                   prefix (the first special.prefix bytes of the low fence,
 *                   which every key between the fences shares), so klen may
 *                   be 0
 *   internal entry: u32 child, key (the first entry's key is empty: it
 *                   stands for the node's low fence)
 */
#define KV_FIRST_SLOT 2
#define KV_INLINE     0
#define KV_OVERFLOW   1
#define KV_LEAF_HDR   3u
#define KV_INNER_HDR  4u

typedef struct kv_ovf_ref {
	uint32_t vlen;  /* value length */
	uint32_t first; /* first page of the chain */
	uint32_t last;  /* last page: freeing links it to the free list */
	uint64_t id;    /* value id, stamped on every page of the chain */
} __attribute__((packed)) kv_ovf_ref;
#define KV_OVF_REF_SIZE ((uint16_t)sizeof(kv_ovf_ref)) /* 20 */

/*
 * Size limits that make every split possible: with items of at most T bytes
 * (line pointer included) a full page plus one item splits into halves of at
 * most (KV_NODE_SPACE - 8 + 2T) / 2 bytes, which must fit beside two
 * maximal fences (2 * (KV_MAX_KEY + 4)): T <= 2024 with 8 KiB pages (1064
 * with 4 KiB pages and their 480-byte keys).
 */
#define KV_FENCE_MAX     (KV_MAX_KEY + KV_LP_SIZE)
#define KV_LEAF_ITEM_MAX (KV_NODE_SPACE / 2u + KV_LP_SIZE - 2u * KV_FENCE_MAX) /* item + LP */
_Static_assert(WR_PAGE_SIZE != 8192 || KV_LEAF_ITEM_MAX == 2024,
               "8 KiB pages keep the format they always had");
#define KV_INNER_ITEM_MAX (KV_INNER_HDR + KV_MAX_KEY + KV_LP_SIZE)
_Static_assert((KV_NODE_SPACE - 2 * KV_LP_SIZE + 2 * KV_LEAF_ITEM_MAX) / 2 <=
                   KV_NODE_SPACE - 2 * KV_FENCE_MAX,
               "a split must always find halves that fit");
_Static_assert(KV_LEAF_HDR + KV_MAX_KEY + KV_OVF_REF_SIZE + KV_LP_SIZE <= KV_LEAF_ITEM_MAX,
               "an overflow entry with a maximal key must fit");

/* The meta page (block 0): this struct right after the page header. */
typedef struct kv_meta {
	uint32_t magic;   /* KV_META_MAGIC */
	uint32_t version; /* KV_META_VERSION */
	uint32_t root;
	uint32_t height;  /* levels; 1 = the root is a leaf */
	uint32_t nblocks; /* blocks [0, nblocks) belong to the tree; later ones are unused */
	uint32_t free_head;
	uint32_t nfree;
	uint32_t reserved;
	uint64_t nkeys;
	uint64_t next_value_id; /* for overflow chains */
} kv_meta;
#define KV_META_MAGIC   0x4b564d54u /* "KVMT" */
#define KV_META_VERSION 1

/* An overflow page: this header after the page header, then len bytes of the value. */
typedef struct kv_ovf_hdr {
	uint64_t id;
	uint32_t seq; /* position in the chain, from 0 */
	uint32_t len;
} kv_ovf_hdr;
#define KV_OVF_CHUNK (KV_SPECIAL_OFF - WR_PAGE_HEADER_SIZE - (uint32_t)sizeof(kv_ovf_hdr))
/*
 * Pages a write is assumed to pin besides its overflow pages: the meta page
 * and the path from the root to a leaf, with room for a split, in any tree
 * of up to six levels.  Fixed, so that the largest value is a number the
 * documentation can give (walrus.h); a deeper tree still meets the
 * writer's own check (kv_write.c).
 */
#define KV_PIN_RESERVE 8u

#define KV_MAX_HEIGHT 20

/* Keys with an "infinite" flag, for fences and search bounds. */
typedef struct kv_key {
	const char *p;
	uint16_t len;
	bool inf; /* minus infinity as a low bound, plus infinity as a high bound */
} kv_key;

/* ---------------------------------------------------------------- kv_page.c */

/*
 * The accessors every page visit of a reader goes through are inline: a
 * get visits three pages and runs a dozen of them per page, and a call each
 * cost more than the search itself.
 */
static inline int kv_cmp(const void *a, size_t al, const void *b, size_t bl)
{
	size_t n = al < bl ? al : bl;
	/* A leaf's keys are short past its prefix (2 or 3 bytes of the issue's
	 * 16): a loop beats the call into memcmp there. */
	if (n <= 8) {
		const unsigned char *x = a, *y = b;
		for (size_t i = 0; i < n; i++)
			if (x[i] != y[i])
				return x[i] < y[i] ? -1 : 1;
	} else {
		int c = memcmp(a, b, n);
		if (c != 0)
			return c;
	}
	return al < bl ? -1 : al > bl ? 1 : 0;
}

static inline wr_page_header kvp_header(const char *page)
{
	wr_page_header h;
	memcpy(&h, page, sizeof(h));
	return h;
}

static inline uint8_t kvp_type(const char *page)
{
	return (uint8_t)page[offsetof(wr_page_header, type)];
}

static inline int kvp_nslots(const char *page)
{
	uint16_t lower;
	memcpy(&lower, page + offsetof(wr_page_header, lower), sizeof(lower));
	return lower > WR_PAGE_HEADER_SIZE ? (lower - WR_PAGE_HEADER_SIZE) / KV_LP_SIZE : 0;
}

static inline kv_lp kvp_lp(const char *page, int slot)
{
	kv_lp lp;
	memcpy(&lp, page + WR_PAGE_HEADER_SIZE + (size_t)slot * KV_LP_SIZE, sizeof(lp));
	return lp;
}

/*
 * The item of @slot.  A line pointer reaching outside the item space gives
 * an empty item: readers check only the header of each page they visit
 * (kvp_sane_header), not every line pointer, so this keeps a damaged page
 * from leading a read outside the page; what such a page says is caught
 * where it matters (kvl_decode, fences, levels) or by kv_verify.
 */
static inline const char *kvp_item(const char *page, int slot, uint16_t *len)
{
	kv_lp lp = kvp_lp(page, slot);
	if (WR_UNLIKELY(lp.off < WR_PAGE_HEADER_SIZE || lp.off + lp.len > KV_SPECIAL_OFF)) {
		*len = 0;
		return page + KV_SPECIAL_OFF;
	}
	*len = lp.len;
	return page + lp.off;
}

static inline kv_special kvp_special(const char *page)
{
	kv_special s;
	memcpy(&s, page + KV_SPECIAL_OFF, sizeof(s));
	return s;
}

/* Free bytes, counting the space that compaction would reclaim. */
int kvp_free_space(const char *page);
bool kvp_insert(char *page, int slot, const void *item, uint16_t len);
void kvp_delete(char *page, int slot);
bool kvp_replace(char *page, int slot, const void *item, uint16_t len);
void kvp_truncate(char *page, int nslots);
void kvp_compact(char *page);
/* Structural sanity of the header and every line pointer (for pages read from
 * disk, for the writer and kv_verify): linear in the number of slots. */
bool kvp_sane(const char *page);

/*
 * The part of kvp_sane that costs O(1): the header's bounds.  Enough for a
 * reader, whose accessors clamp each line pointer they use (kvp_item).
 */
static inline bool kvp_sane_header(const char *page)
{
	wr_page_header h = kvp_header(page);
	return h.version == WR_PAGE_VERSION && h.lower >= WR_PAGE_HEADER_SIZE &&
	       h.lower <= h.upper && h.upper <= h.special && h.special == KV_SPECIAL_OFF &&
	       (h.lower - WR_PAGE_HEADER_SIZE) % KV_LP_SIZE == 0;
}

void kvp_set_special(char *page, const kv_special *s);

/* Node pages. */
void kvn_init(char *page, uint16_t level, uint16_t flags, wr_blkno left, wr_blkno right,
              const kv_key *low, const kv_key *high);

static inline kv_key kvn_fence(const char *page, int slot, uint16_t inf_flag)
{
	kv_key k;
	k.p = kvp_item(page, slot, &k.len);
	k.inf = (kvp_special(page).flags & inf_flag) != 0;
	return k;
}

static inline kv_key kvn_low(const char *page)
{
	return kvn_fence(page, 0, KVN_LOW_INF);
}

static inline kv_key kvn_high(const char *page)
{
	return kvn_fence(page, 1, KVN_HIGH_INF);
}

static inline int kvn_nentries(const char *page)
{
	int n = kvp_nslots(page) - KV_FIRST_SLOT;
	return n > 0 ? n : 0;
}

/* The stored key of leaf entry @slot (without the leaf's prefix), clamped to
 * the item (a damaged page never leads a read astray). */
static inline kv_key kvn_leaf_key(const char *page, int slot)
{
	uint16_t len, kl = 0;
	const char *item = kvp_item(page, slot, &len);
	if (len >= KV_LEAF_HDR)
		memcpy(&kl, item, sizeof(kl));
	kv_key k = {.p = item + KV_LEAF_HDR, .inf = false};
	k.len =
	    len >= KV_LEAF_HDR ? (uint16_t)(kl < len - KV_LEAF_HDR ? kl : len - KV_LEAF_HDR) : 0;
	return k;
}

/* Length of the longest common prefix of two keys. */
static inline uint16_t kv_lcp(const char *a, uint16_t al, const char *b, uint16_t bl)
{
	uint16_t n = al < bl ? al : bl, i = 0;
	while (i < n && a[i] == b[i])
		i++;
	return i;
}

/*
 * The key bytes a leaf's entries leave out: the first special.prefix bytes of
 * its low fence (empty for internal nodes, and for leaves with an infinite
 * fence).  Clamped to the fence and to KV_MAX_KEY, for a damaged page or the
 * torn one a peek may read: callers copy it into key buffers.
 */
static inline kv_key kvn_prefix(const char *page)
{
	kv_key low = kvn_low(page);
	uint16_t n = kvp_special(page).prefix;
	if (n > low.len)
		n = low.len;
	low.len = low.inf ? 0 : n < KV_MAX_KEY ? n : KV_MAX_KEY;
	low.inf = false;
	return low;
}

/* The longest prefix a leaf with these fences may leave out: every key in
 * [low, high) shares the common prefix of the two. */
static inline uint16_t kvn_prefix_for(const kv_key *low, const kv_key *high)
{
	return low->inf || high->inf ? 0 : kv_lcp(low->p, low->len, high->p, high->len);
}

/*
 * The most a leaf's prefix may be: what its fences share; for the rightmost
 * leaf (high fence +inf, low finite: an "open" leaf), its low fence whole,
 * the entries themselves being what keeps the prefix honest there: a key
 * without it is above them all, and the writer shortens the prefix (or
 * splits) before inserting one (kv_modify.c, admit_key).
 */
static inline uint16_t kvn_prefix_bound(const char *page)
{
	kv_key low = kvn_low(page), high = kvn_high(page);
	if (!low.inf && high.inf)
		return low.len;
	return kvn_prefix_for(&low, &high);
}

/* The key of internal entry @slot. */
static inline kv_key kvn_inner_key(const char *page, int slot)
{
	uint16_t len;
	const char *item = kvp_item(page, slot, &len);
	kv_key k = {.p = item + KV_INNER_HDR, .inf = false};
	k.len = len >= KV_INNER_HDR ? (uint16_t)(len - KV_INNER_HDR) : 0;
	return k;
}

/*
 * The whole key of entry @slot (leaf or internal): in the page, or for a leaf
 * with a prefix assembled in @buf (KV_MAX_KEY bytes).
 */
static inline kv_key kvn_entry_key(const char *page, int slot, char *buf)
{
	kv_special s = kvp_special(page);
	if (s.level != 0)
		return kvn_inner_key(page, slot);
	kv_key k = kvn_leaf_key(page, slot);
	if (s.prefix == 0)
		return k;
	kv_key p = kvn_prefix(page);
	uint16_t sl = k.len <= KV_MAX_KEY - p.len ? k.len : (uint16_t)(KV_MAX_KEY - p.len);
	memcpy(buf, p.p, p.len);
	memcpy(buf + p.len, k.p, sl);
	return (kv_key){.p = buf, .len = (uint16_t)(p.len + sl), .inf = false};
}

/* Every item of the node well-formed for its level (fences, entries, a
 * leaf's prefix within what its fences share). */
bool kvn_entries_sane(const char *page);
/* First entry slot whose key is >= k (nslots if none); *eq when equal.  @k is
 * a whole key: a leaf's prefix is compared here. */
int kvn_lower_bound(const char *page, const void *k, size_t kl, bool *eq);
/* Internal: the slot of the child covering k (or, with @before, the keys just below k). */
int kvn_child_slot(const char *page, const kv_key *k, bool before);

static inline wr_blkno kvn_child(const char *page, int slot)
{
	uint16_t len;
	uint32_t child = WR_INVALID_BLKNO;
	const char *item = kvp_item(page, slot, &len);
	if (len >= sizeof(child))
		memcpy(&child, item, sizeof(child));
	return child;
}

/* Leaf entries. */
typedef struct kv_leaf_ent {
	const char *key;
	uint16_t klen;
	uint8_t kind;
	const char *val; /* inline */
	uint32_t vlen;
	kv_ovf_ref ref; /* overflow */
} kv_leaf_ent;
/* Inline: a scan decodes every entry it returns. */
static inline bool kvl_decode(const char *item, uint16_t len, kv_leaf_ent *e)
{
	if (len < KV_LEAF_HDR)
		return false;
	memcpy(&e->klen, item, sizeof(e->klen));
	e->kind = (uint8_t)item[2];
	e->key = item + KV_LEAF_HDR;
	if ((uint32_t)KV_LEAF_HDR + e->klen > len || e->klen > KV_MAX_KEY)
		return false;
	const char *rest = e->key + e->klen;
	uint32_t rlen = len - KV_LEAF_HDR - e->klen;
	if (e->kind == KV_INLINE) {
		e->val = rest;
		e->vlen = rlen;
		return true;
	}
	if (e->kind != KV_OVERFLOW || rlen != KV_OVF_REF_SIZE)
		return false;
	memcpy(&e->ref, rest, sizeof(e->ref));
	e->val = NULL;
	e->vlen = e->ref.vlen;
	return true;
}

uint16_t kvl_encode_inline(char *out, const void *k, uint16_t kl, const void *v, uint32_t vl);
uint16_t kvl_encode_ovf(char *out, const void *k, uint16_t kl, const kv_ovf_ref *ref);
bool kvl_fits_inline(size_t kl, size_t vl);
/*
 * Leaf entry @item, whose key leaves out the bytes @from, re-encoded to leave
 * out the first @to bytes of its whole key instead (the caller knows the
 * entry's key has them); returns the new length.  @out must not overlap.
 */
uint16_t kvl_reencode(const char *item, uint16_t len, const kv_key *from, uint16_t to, char *out);
uint16_t kvi_encode(char *out, wr_blkno child, const void *k, uint16_t kl);

/* Overflow, free and meta pages. */
void kvo_init(char *page, uint64_t id, uint32_t seq, const void *data, uint32_t len, wr_blkno next);
kv_ovf_hdr kvo_header(const char *page);
const char *kvo_data(const char *page);
void kvf_init(char *page, wr_blkno next);
void kvm_init(char *page, const kv_meta *m);
kv_meta kvm_get(const char *page);
void kvm_set(char *page, const kv_meta *m);

/*
 * Page ops: what a WAL record's block data holds, applied by the writer and
 * by redo through the same function, so both produce the same bytes.
 * Each op is: u8 code, u16 slot, u16 len, len bytes.
 */
enum kv_op_code {
	KVOP_INIT = 1, /* the whole page: bytes [0, lower) and [upper, 8192) */
	KVOP_INSERT,   /* item at slot */
	KVOP_DELETE,   /* slot */
	KVOP_REPLACE,  /* item at slot */
	KVOP_TRUNCATE, /* keep slots [0, slot) */
	KVOP_SPECIAL,  /* kv_special */
	KVOP_META,     /* kv_meta */
	KVOP_NKEYS,    /* u64: the meta page's key count, the rest unchanged */
	KVOP_PREFIX,   /* a leaf's prefix becomes slot bytes long: every entry re-encoded */
	KVOP_NCODES    /* a new op is a new WAL format (wal.h, "WAL formats") */
};
#define KVOP_HDR 5u
/* Appends to @out the compact image op of @page; returns its size. */
size_t kvop_image_size(const char *page);
void kvop_image(const char *page, char *out);
/* The first op code in @ops this walrus does not know (-1: none; a malformed
 * sequence is kvop_apply's to report). */
int kvop_unknown(const char *ops, size_t len);
/* Applies a sequence of ops; false (page unspecified) when malformed or an item does not fit. */
bool kvop_apply(char *page, const char *ops, size_t len, char *why, size_t whylen);
/* "insert slot 3 (40 B); ..." */
void kvop_describe(const char *ops, size_t len, char *buf, size_t buflen);

/* ---------------------------------------------------------------- kv_tree.c */

/*
 * Readers on different CPUs must not write the same cache line: the root hint
 * (read by every descent, written when the root moves) has a line of its own,
 * and gets are counted in one of KV_GET_STRIPES lines chosen by the backend
 * (kv_me->get_stripe; backends that share a stripe are still counted exactly).
 */
#define KV_GET_STRIPES 16

/*
 * What the instance keeps in shared memory about one tree (a key space's
 * relation): hints, all of them rebuilt from the tree when lost.  KV_REL's
 * lives in slot 0 for good; other trees take a slot when a writer uses them
 * (kv_tree_claim, under the tree lock) and give it up to a tree used more
 * lately.  Readers only read root_hint, between two reads of seq: a slot
 * that changed hands meanwhile (seq odd, or moved on, or another rel) is
 * not used and the reader reads the meta page instead.
 */
#define KV_TREE_SLOTS 64
typedef struct kv_tree_sh {
	_Alignas(64) _Atomic uint64_t root_hint; /* root block | (level + 1) << 32; 0 = unknown */
	_Atomic uint32_t rel;                    /* 0: free */
	_Atomic uint32_t seq;                    /* odd while the slot changes hands */
	/* The writer's, under the tree lock, on a line of their own: readers
	 * of root_hint must not see it stolen by each put. */
	/* Blocks of the data file allocated at least (0: not known yet).  The
	 * file never shrinks while shared memory lives; compaction punches out
	 * its tail and lowers this to the tree's end (kv_compact.c), so the
	 * writer allocates that space again. */
	_Alignas(64) wr_blkno file_blocks;
	/* Whether the data file may have holes past file_blocks (a compaction's
	 * punch, in this instance or an earlier one: smgr_sparse); known once
	 * looked at. */
	bool holes_known, holes;
	bool used; /* the claim clock's reference bit */
	/*
	 * The leaf the last put found at the tree's right end (0: none known):
	 * a hint for ascending loads, validated on the page before each use
	 * (kv_modify.c, put_rightmost).
	 */
	uint32_t rightmost_leaf;
} kv_tree_sh;

/*
 * The tree the calling thread works on: set by every kv.h entry point that
 * takes a relation (the plain ones set KV_REL), by an iterator's moves, and
 * by a batch at each operation (kvw_tree_use).
 */
extern WR_TLS wr_relid kv_cur_rel;
/* The slot of KV_REL's tree (slot 0). */
#define KV_TREE_MAIN (&kv_sh->trees[0])
/* The slot of a tree other than KV_REL's, claimed if it has none (tree lock
 * held exclusive); its root hint for readers (0: none to trust). */
kv_tree_sh *kv_tree_claim_other(void);
uint64_t kv_tree_hint_other(void);
typedef struct kv_shared {
	wr_rwlock tree_lock;
	_Atomic uint64_t puts, deletes, batches, aborts;
	_Atomic uint64_t splits, pages_freed, pages_reused;
	_Atomic uint64_t fastpath_hits; /* puts that went to the rightmost leaf without a descent */
	_Atomic uint64_t hint_hits;     /* puts that went to a read's leaf without a descent */
	_Atomic uint64_t prefetch_batches; /* batches whose leaves were read ahead (kv_batch.c) */
	_Atomic uint64_t prefetch_leaves; /* leaves those read-aheads found missing from the pool */
	_Atomic uint64_t shifts;          /* full leaves that gave entries to a sibling */
	_Atomic uint64_t file_grows;      /* times a writer grew the data file (kv_write.c) */
	_Atomic uint64_t size_checks;     /* times a writer asked the data file's size */
	/* compactions finished, and what they did (kv_compact.c) */
	_Atomic uint64_t compactions, compact_merged, compact_moved, compact_given_back;
	/* Leaves iterators (kv_iter.c) and compaction's pack (kv_compact.c)
	 * handed to read streams ahead of them, and of those the ones read
	 * (io_uring) or advised (sync) because the pool lacked them. */
	_Atomic uint64_t scan_ahead, scan_ahead_io;
	/* Changes of any tree's free list (kv_write.c, kv_compact.c), under
	 * the tree lock: a compaction keeps its copy of the list while this
	 * stays. */
	uint64_t free_gen;
	/* Bumped after a key space is dropped (kv_space.c): a handle that saw
	 * another value looks its space up again before using it. */
	_Atomic uint64_t drop_gen;
	_Atomic uint32_t tree_clock;     /* the next slot kv_tree_claim looks at */
	_Atomic bool catalog_ok;         /* the catalog's tree exists (kv_space.c) */
	wr_relid next_relid;             /* for a new key space, 0: not known yet (tree lock) */
	kv_tree_sh trees[KV_TREE_SLOTS]; /* trees[0]: KV_REL's, for good */
	_Alignas(64) struct {
		_Alignas(64) _Atomic uint64_t n;
		_Atomic uint64_t optimistic;      /* of them answered by a peek at the leaf */
		_Atomic uint64_t opt_retries;     /* peeks a writer or a retag overlapped */
		_Atomic uint64_t copies;          /* internal nodes copied by descents */
		_Atomic uint64_t copies_rationed; /* level-1 nodes read without taking a copy */
		_Atomic uint64_t mapped;          /* optimistic gets read through the mapping */
		_Atomic uint64_t mapped_retries;
		_Atomic uint64_t mapped_prefetches; /* mapped leaves asked of the kernel first */
	} gets[KV_GET_STRIPES];
	bool mapped_reads; /* option mmap_reads, set at creation */
} kv_shared;
extern kv_shared *kv_sh;

/* The current tree's slot, claimed if it has none (tree lock held exclusive). */
static inline kv_tree_sh *kv_tree_claim(void)
{
	return kv_cur_rel == KV_REL ? KV_TREE_MAIN : kv_tree_claim_other();
}
/* Readers: the current tree's root hint, 0 when none can be trusted. */
static inline uint64_t kv_tree_hint(void)
{
	return kv_cur_rel == KV_REL ? atomic_load(&KV_TREE_MAIN->root_hint) : kv_tree_hint_other();
}

static inline uint64_t kv_hint_make(wr_blkno root, uint32_t height)
{
	return (uint64_t)root | ((uint64_t)height << 32);
}

/* Internal return code: a value's overflow chain changed under a reader. */
#define KV_RETRY 1

/* A reader's position: a pinned, share-locked node. */
typedef struct kv_rpage {
	int buf;
	wr_blkno blk;
	const char *page;
} kv_rpage;
enum kv_seek_mode {
	KV_SEEK_GE, /* the node covering k (k NULL with inf = minus infinity) */
	KV_SEEK_LT, /* the node covering the keys just below k (inf = plus infinity) */
};
int kv_descend(const kv_key *k, int mode, kv_rpage *out);
void kv_rpage_done(kv_rpage *p);
/*
 * The leaves a scan from @k visits next, as the level-1 node above them
 * lists them (the node a descent for @k passes through: this backend's
 * copy of it, or the node read under its share lock): for KV_SEEK_GE the
 * child covering @k and those after it, for KV_SEEK_LT the child covering
 * the keys just below @k and those before it, in that order, @cap at most.
 * With @until (a scan's far bound: its exclusive upper bound for
 * KV_SEEK_GE, its lower bound for KV_SEEK_LT), leaves wholly past it are
 * left out.  When @more, the leaves after the last one start at
 * next[0 .. next_len): a plan from there in the same mode continues this
 * one.  A tree of one leaf plans none.  Only a hint: leaves split, merge
 * and move meanwhile.
 */
typedef struct kv_leaf_plan {
	wr_blkno *blk; /* in: room for @cap blocks; out: n of them */
	int cap, n;
	const kv_key *until; /* in: NULL for none */
	bool more;
	uint16_t next_len;
	char next[KV_MAX_KEY];
} kv_leaf_plan;
int kv_plan_leaves(const kv_key *k, int mode, kv_leaf_plan *plan);
/* Reads an overflow value into dst (ref->vlen bytes); KV_RETRY if the chain changed. */
int kv_ovf_read(const kv_ovf_ref *ref, char *dst);

/* kv_get_in (@v not NULL) or kv_get_into_in (@buf, @cap), noting in *@hint
 * (when not NULL) the leaf the search ended in (blk 0: none). */
int kv_get_hinted(wr_relid rel, const void *k, size_t kl, void **v, void *buf, size_t cap,
                  size_t *vl, kv_leaf_hint *hint);

/* The meta page as it is in the pool (the tree lock held, either mode, or a stable tree). */
int kv_read_meta(kv_meta *m);

/* ---------------------------------------------------------------- kv_write.c */

/* The writer's view of a page in the current batch. */
#define KVW_LAZY_MAX   8    /* ops a lazy undo remembers */
#define KVW_LAZY_BYTES 1024 /* replaced items a lazy undo keeps, after the undo image */
/* An op a lazy undo takes back: an insert at @slot, or a replace of the
 * item @old at @slot, whose bytes are kept at @at after the undo image. */
typedef struct kvw_lazy_op {
	uint8_t code; /* KVOP_INSERT or KVOP_REPLACE */
	uint16_t slot;
	uint16_t at;
	kv_lp old;
} kvw_lazy_op;
typedef struct kvw_page {
	wr_relid rel; /* the tree's relation */
	wr_blkno blk;
	int buf;
	char *page;
	char *pre; /* image before the batch changed it (NULL: not changed, or new) */
	uint16_t pre_lower, pre_upper; /* what pre holds: [0, lower) and [upper, end) */
	char *undo;                    /* pre's buffer, kept with the struct when it is reused */
	bool locked;                   /* exclusive content lock held */
	bool member; /* changed in this batch: stays pinned and locked to the end */
	bool fresh;  /* past the tree's end before the batch: nothing to restore */
	bool sane;   /* checked as a node by this batch (kv_modify.c) */
	/*
	 * Lazy undo (kv_write.c): while the batch has only inserted into the
	 * page and replaced its items, none compacting it, the header as the
	 * batch found it, the slots inserted and the items replaced stand for
	 * the image, and pre stays NULL.
	 */
	bool lazy;
	uint8_t nops;
	uint16_t kept; /* bytes of replaced items kept */
	kvw_lazy_op ops[KVW_LAZY_MAX];
	char hdr0[WR_PAGE_HEADER_SIZE];
} kvw_page;

/* A block of the record being built. */
typedef struct rb_block {
	kvw_page *p;
	uint8_t flags;
	char *ops;
	size_t len, cap;
} rb_block;

/*
 * Page structs (and undo buffers) a backend keeps between batches: a put
 * needs two, and their malloc/free each time cost more than the put's
 * tree work in an ascending load.
 */
#define KVW_SPARE 64

/* A tree a batch changes: its meta page, kept in memory to the commit. */
typedef struct kvw_tree {
	wr_relid rel;
	kv_meta meta, meta0; /* working copy, and as the batch found it */
	bool created;        /* by this batch (kvw_tree_create) */
} kvw_tree;

/* A batch in progress (kv_write.c), one per backend. */
typedef struct kv_write_state {
	kvw_page **pages; /* every page this batch pinned, of every tree */
	uint32_t n, cap;
	kvw_page **hash; /* open addressing by relation and block number */
	uint32_t hcap;
	/* The current tree's (kvw_tree_use): trees[cur] while another is current */
	wr_relid rel;
	kv_meta meta, meta0;
	kvw_tree *trees; /* the trees of the batch, in the order it reached them */
	uint32_t ntrees, tcap, cur;
	wr_relid *drops; /* relations the batch drops: its commit record says so */
	size_t ndrops, dcap;
	rb_block rb[WAL_MAX_BLOCKS];
	int nrb;
	int nrec;        /* records inserted by this batch */
	int crash_after; /* kv_test_crash_after_records (test builds only) */
	uint64_t splits, freed, reused, fastpath, hinted, shifts;
	kvw_page *spare[KVW_SPARE]; /* structs of ended batches, with their undo buffers */
	uint32_t nspare;
} kv_write_state;

#define KV_NODE_COPIES     512 /* per backend, any node in any place (kv_tree.c) */
#define KV_COPY_INDEX_BITS 10  /* the copies' hash index: twice their number */
typedef struct kv_node_copy kv_node_copy;

/*
 * What a backend keeps of the tree: its batch in progress, its copies of
 * internal nodes (kv_tree.c), its line of the get counters.  The calling
 * thread's current one is kv_me (kv_backend_set).
 */
struct kv_backend {
	kv_write_state w;
	kv_node_copy *copies[KV_NODE_COPIES];
	uint16_t copy_index[1u << KV_COPY_INDEX_BITS]; /* copy number + 1 by block; 0: empty */
	uint8_t copy_used[KV_NODE_COPIES];             /* the clock's reference bits */
	uint16_t copy_hand;
	/* Level-1 copies the clock evicted in the current window and how often
	 * they had been found, level-1 reads since the last copy taken, and
	 * whether copies of that level are rationed (kv_tree.c, copy_victim). */
	uint32_t l1_evicted, l1_evicted_found, l1_reads;
	bool l1_rationed;
	/* Mapped peeks (kv_tree.c, peek_mapped): how many are left to prefetch
	 * since the last one that waited for the device, and a count that
	 * times one in KV_MAP_TIME_EVERY of the others. */
	uint8_t map_slow, map_peeks;
	unsigned get_stripe;
};
extern WR_TLS kv_backend *kv_me;

/* Frees a backend's batch state (kv_backend_free). */
void kvw_state_free(kv_write_state *ws);
/* Starts a batch (tree lock held): loads the current tree's meta page. */
int kvw_batch_begin(void);
/* Starts a batch with no tree yet: kvw_tree_use or kvw_tree_create next. */
void kvw_batch_reset(void);
/* The batch's next changes go to the tree of relation @rel (loading its meta
 * page the first time): kv_cur_rel becomes @rel. */
int kvw_tree_use(wr_relid rel);
/* The batch builds a new, empty tree in relation @rel (its file exists,
 * empty: smgr_create): a meta page and a root leaf, then @rel is current. */
int kvw_tree_create(wr_relid rel);
/* The batch's commit record names @rel as dropped: redo removes its file
 * (the caller removes it after the commit: kv_space.c). */
int kvw_tree_drop(wr_relid rel);
/* The page of @blk, pinned (for reading: the writer needs no content lock). */
int kvw_get(wr_blkno blk, kvw_page **p);
/* Before a change: exclusive lock, kept to the batch's end, and the image to undo it. */
int kvw_modify(kvw_page *p);
/* A new page (free list, unused tail, or extension), locked; to be initialised by an op. */
int kvw_alloc(kvw_page **p);
/* Puts @p on the free list (the page becomes a free page). */
int kvw_free_page(kvw_page *p);
/* Links the overflow chain [first .. @last] of @n pages to the free list. */
int kvw_free_chain(kvw_page *last, wr_blkno first, uint32_t n);
/* The batch's working copy of the meta page (logged at commit). */
kv_meta *kvw_meta(void);
uint32_t kvw_pinned(void);
/* Whether @n more pages can be pinned without reaching the batch's limit. */
bool kvw_pin_room(uint32_t n);
uint64_t kvw_next_value_id(void);
void kvw_count_split(void);
void kvw_count_fastpath(void);
void kvw_count_hinted(void);
void kvw_count_shift(void);
/* Logs an op for @p after applying it to the page (the same code redo runs). */
int kvw_op(kvw_page *p, uint8_t code, uint16_t slot, const void *payload, uint16_t len);
int kvw_op_image(kvw_page *p, const char *image_page);
int kvw_op_special(kvw_page *p, const kv_special *s);
/* Inserts the record being built, if any (KV_INFO_CHANGE | KV_MORE). */
int kvw_flush_record(void);
/* Ends the batch with its commit record (*lsn 0 if nothing was logged), releasing
 * every page; on error the caller must kvw_abort(). */
int kvw_commit(wr_lsn *lsn);
/* Undoes the batch in memory, voids its records, releases every page. */
void kvw_abort(void);
bool kvw_logged(void);

/* ---------------------------------------------------------------- kv_mvcc.c */

/* A write batch's csn: taken (versions noted while a snapshot lives: true),
 * then published if @committed; both under the tree lock, or in redo.
 * @ending (NULL: none): the snapshot of the transaction the batch commits,
 * which needs none of its versions. */
bool kv_mv_batch_begin(const kv_snap *ending);
void kv_mv_batch_end(bool committed, wr_lsn lsn);
/* Before the batch's first change to @k: the value it had (@old, NULL when
 * absent) goes to the version store, if any snapshot needs it. */
int kv_mv_note(const void *k, uint16_t kl, const kv_leaf_ent *old);
/* The same with the value before in hand (redo's). */
void kv_mv_note_value(const void *k, uint16_t kl, bool absent, const char *val, uint32_t vlen);
/* The open batch's versions cannot be kept: snapshots older than it lose. */
void kv_mv_lose_open_batch(void);

/* ---------------------------------------------------------------- kv_space.c */

/* Removes relation @rel: the engine's wait for its readers, its buffers, its files. */
void kv_drop_files(wr_relid rel);
/* A tree whose relation's file this batch removes (kv_space_drop). */
int kv_batch_drop_tree(kv_batch *b, wr_relid rel);
/* kv_batch_commit whose operations @build(@arg) adds to @b under the tree lock. */
int kv_batch_commit_built(kv_batch *b, int durability, kv_commit_check_fn build, void *arg,
                          wr_lsn *commit_lsn);

/* ---------------------------------------------------------------- kv_redo_mv.c */

/* A replayed batch's versions (a standby with snapshots): its pages before
 * (kv_rv_begin, before redo touches them), after each record (kv_rv_after),
 * and the diff of their leaves noted (kv_rv_finish, pages still held). */
typedef struct kv_rv_blk {
	wr_relid rel;
	wr_blkno blk;
} kv_rv_blk;
void kv_rv_begin(const kv_rv_blk *blks, size_t n);
void kv_rv_after(wr_relid rel, wr_blkno blk, const char *page);
void kv_rv_finish(void);

/* ---------------------------------------------------------------- kv_modify.c */

/* Put and delete inside a batch (tree lock held).  Delete: ENOTFOUND if absent.
 * @hint (NULL: none): where a read found @k, tried before a descent. */
int kvm_put(const void *k, uint16_t kl, const void *v, uint32_t vl, const kv_leaf_hint *hint);
int kvm_delete(const void *k, uint16_t kl);
/*
 * Where a split of @page inserting @item at @slot cuts (for tests): the left
 * half keeps entries [0, k) of the entries with the new one in place;
 * returns k (-1 if no cut fits) and the separator.
 */
int kvm_split_point(const char *page, int slot, const char *item, uint16_t len, char *sep,
                    uint16_t *seplen);

/*
 * Compaction's tree ops (kv_compact.c drives them, inside a batch).
 * kvm_pack_pair: the leaf at slot @ps of level-1 node @parent takes its right
 * sibling whole when it fits, else as many of its first entries as leave it
 * a shift's slack; *result says which (KVM_PACK_*).  kvm_relocate: node @x
 * (at slot @ps of @parent, or the root when @parent is NULL) moves to free
 * page @dest, already taken off the free list; @x is freed.
 */
enum { KVM_PACK_NONE, KVM_PACK_POURED, KVM_PACK_MERGED };
int kvm_pack_pair(kvw_page *parent, int ps, int *result);
int kvm_relocate(kvw_page *parent, int ps, kvw_page *x, kvw_page *dest);
/* Page @blk, piece @seq of the overflow value of key @k (@prev the piece
 * before it), moves to free page @dest: the link to it and the entry's
 * first or last page follow; @blk is freed. */
int kvm_ovf_move(const void *k, uint16_t kl, wr_blkno prev, wr_blkno blk, uint32_t seq,
                 kvw_page *dest);
/* The leaf for @k, its parent (NULL when the root is a leaf) and its slot there. */
int kvm_leaf_parent(const void *k, uint16_t kl, kvw_page **parent, int *ps, kvw_page **leaf);
/* A batch page checked to be a well-formed node of @level (ECORRUPT naming it). */
int kvm_check_node(kvw_page *p, int level);
/* While the root has a single child, that child becomes the root (its page freed). */
int kvm_collapse_root(void);

/* ---------------------------------------------------------------- kv_redo.c */

/* RM_KV info: the op in the low bits, flags above. */
#define KV_INFO_CREATE 0x01 /* meta page and first root */
#define KV_INFO_CHANGE 0x02 /* page ops */
#define KV_INFO_COMMIT 0x03 /* the last record of a batch (with the meta page if changed) */
#define KV_INFO_ABORT  0x04 /* the batch's records so far are void */
#define KV_INFO_OP     0x0f
#define KV_DROPS       0x20 /* COMMIT: the main data lists relations dropped (u32 each) */
#define KV_FIRST       0x40 /* the first record of a batch: forget unfinished ones */
#define KV_MORE        0x80 /* more records of the batch follow */

#endif /* WALRUS_KV_INT_H */
