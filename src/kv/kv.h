/*
 * kv.h - the ordered key-value store: one B+tree on 8 KiB pages in
 * relation KV_REL (DIR/base/1...), every change WAL-logged (RM_KV), shared
 * by every process of the instance through the buffer pool.
 *
 * Keys are binary strings of 1..KV_MAX_KEY bytes ordered by memcmp (a
 * prefix sorts first); values are binary strings of 0..KV_MAX_VALUE bytes.
 * Small entries live inline in the leaves; larger values go to a chain of
 * overflow pages.  Block 0 is the meta page (root, height, free list, key
 * count); freed pages go to the free list and are reused before the file
 * grows.  The file grows ahead of the tree in runs (an eighth of its size,
 * up to 1 MiB, fallocate); the blocks past the tree's end are unused and
 * taken in order.  Compaction (kv_compact) packs the leaves, moves the tree
 * to the front of the file and lowers its end; kv_compact_give_back punches
 * the blocks past the end out of the file (it keeps its length).  Layout
 * and invariants: src/kv/README.md.
 *
 * Owns: relation KV_REL; region "kv" (the tree writer lock, a root hint and
 * the counters); region "mvcc" (commit numbers, the snapshot table and the
 * version store: "snapshots" below); per process, the writer's batch state
 * and the redo stash.
 *
 * Locks: writers (kv_batch_commit, kv_put, kv_delete, kv_create_if_missing)
 * take the tree lock exclusive while they apply a batch in memory and
 * insert its WAL records, and release it *before* waiting for the WAL flush
 * (group commit).  A writer keeps every page it changed pinned and
 * exclusively content-locked until the batch's last record is inserted.
 * Readers (kv_get*, iterators) never take the tree lock and hold at most one
 * page content lock (shared) at a time, B-link style: they check each
 * page's fences, move right past a split, and restart from the root when a
 * page was freed or reused.  A point get first peeks at its leaf without a
 * pin or a lock (buf_peek: used only if no exclusive holder overlapped) and
 * takes the locked path when that fails.  kv_verify takes the tree lock
 * shared (writers wait while it runs).  kv_compact takes it exclusive for
 * each of its batches, as a writer (readers see its moves as splits and
 * deletes); kv_compact_give_back for the punch.
 *
 * Durability: a batch is atomic across crashes.  KV_SYNC returns after the
 * batch's commit record is durable; KV_ASYNC returns at once and the WAL
 * writer flushes soon (a crash may lose the batch, never half of it).
 *
 * Returns: WALRUS_OK or a WALRUS_E* code with a message (walrus_errmsg()):
 * EINVAL (empty key, bad durability), ETOOBIG (key over 1 KiB, value over
 * 64 MiB, a value or batch needing more than a quarter of shared_buffers
 * pinned at once: its overflow pages plus KV_PIN_RESERVE, or kv_get_into's
 * buffer too small), ENOTFOUND (absent key), ENOMEM,
 * EBUSY (every buffer pinned), ENOSPC (the file cannot grow by the block a
 * batch needs; a run that does not fit falls back to that block, with a
 * WARNING), and I/O errors from the buffer pool (EIO, ECORRUPT for a page
 * whose checksum fails).  A batch that fails changes
 * nothing: its pages are restored and its WAL records are discarded by redo.
 * PANICs: when a redo record is malformed (recovery cannot continue), and
 * through the WAL when a record cannot be inserted.
 */
#ifndef WALRUS_KV_H
#define WALRUS_KV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/common.h"
#include "storage/storage.h"

#define KV_REL       1u             /* the tree's relation: DIR/base/1 */
#define KV_MAX_KEY   WALRUS_MAX_KEY /* bytes: 1024, 480 with 4 KiB pages */
#define KV_MAX_VALUE (64u << 20)    /* bytes */

/* Durability of a commit. */
enum kv_durability {
	KV_SYNC = 1,  /* return once the commit record is flushed (group commit) */
	KV_ASYNC = 2, /* return at once; the WAL writer flushes soon */
};

/* ---------------------------------------------------------------- setup */

/* Shared memory for region "kv". */
size_t kv_shmem_size(void);
/* While creating shared memory: carves and initialises region "kv". */
int kv_shmem_init(void);
/* In every process after shm attach: finds region "kv". */
int kv_attach(void);
/* While creating shared memory: gets may read leaves the pool does not hold
 * through a mapping of the data file (option mmap_reads). */
void kv_set_mapped_reads(bool on);
/*
 * Backends: each handle of the application has its own batch in progress
 * and its own copies of internal nodes; the engine makes one current in the
 * calling thread for the length of a public call (kv_backend_set; NULL: the
 * process's default, used by the instance's own processes).
 */
typedef struct kv_backend kv_backend;
kv_backend *kv_backend_new(void); /* NULL with a message */
void kv_backend_free(kv_backend *b);
void kv_backend_set(kv_backend *b);
/* Registers RM_KV (redo and describe, for recovery and waldump). */
void kv_register_rmgr(void);
/*
 * Called by the recovery driver at the end of WAL: discards a batch whose
 * commit record never arrived.  Safe to skip: the next batch's first record
 * (or a new recovery) discards it too.
 */
void kv_redo_end(void);
/* The start of the key-value batch redo holds back until its last record
 * (0: none): a standby's restartpoint may not begin after it, since its
 * pages do not hold the batch yet (see kv_redo.c). */
wr_lsn kv_redo_batch_start(void);
/*
 * Creates relation KV_REL with its meta page and an empty root leaf (one
 * WAL record, flushed) unless it exists.  Idempotent; call once after
 * recovery, with the WAL, the buffer pool and region "kv" attached.
 */
int kv_create_if_missing(void);
/*
 * Once a checkpoint has followed the tree's creation, its file must exist
 * with its meta page: a missing or emptied DIR/base/1 is damage
 * (WALRUS_ECORRUPT naming the file), never a reason to start over with an
 * empty tree.  kv_check_file runs before recovery (redo would create the
 * file), kv_check_tree after it (it reads the meta page through the pool).
 */
int kv_check_file(void);
int kv_check_tree(void);

/* ---------------------------------------------------------------- reads */

/* The value of @k in a malloc'd buffer (*v, *vl; free it); ENOTFOUND when absent. */
int kv_get(const void *k, size_t kl, void **v, size_t *vl);
/*
 * The value of @k into @buf.  *vl gets the value's size; when it exceeds
 * @cap the call fails with ETOOBIG ("buffer too small") and copies nothing.
 */
int kv_get_into(const void *k, size_t kl, void *buf, size_t cap, size_t *vl);

/* ---------------------------------------------------------------- writes */

typedef struct kv_batch kv_batch;

/* An empty batch; NULL when out of memory. */
kv_batch *kv_batch_new(void);
/* Adds a put / delete (copies key and value); EINVAL/ETOOBIG on bad input. */
int kv_batch_put(kv_batch *b, const void *k, size_t kl, const void *v, size_t vl);
int kv_batch_delete(kv_batch *b, const void *k, size_t kl);
size_t kv_batch_count(const kv_batch *b);
void kv_batch_clear(kv_batch *b);
void kv_batch_free(kv_batch *b);
/*
 * Applies the batch's operations in order, atomically: after a crash either
 * all of them or none are there.  A delete of an absent key is a no-op.
 * *commit_lsn (may be NULL) gets the LSN the commit is durable at (0 when
 * nothing was logged).  The batch is left as it was (clear it to reuse).
 */
int kv_batch_commit(kv_batch *b, int durability, wr_lsn *commit_lsn);
/* One put as a batch of one. */
int kv_put(const void *k, size_t kl, const void *v, size_t vl, int durability);
/* One delete; ENOTFOUND (and nothing logged) when the key is absent. */
int kv_delete(const void *k, size_t kl, int durability);

/* ---------------------------------------------------------------- iterators */

/*
 * Ordered iteration over [lo, hi) (NULL = unbounded; hi is exclusive).  An
 * iterator takes no lock between calls and sees concurrent writes loosely:
 * a key present for the whole scan is returned exactly once, keys added or
 * removed meanwhile may or may not be, and every value returned is one that
 * was committed (never torn).  Key and value pointers stay valid until the
 * iterator moves or closes.  Moves return I/O errors; at either end the
 * iterator becomes invalid.
 */
typedef struct kv_iter kv_iter;

/*
 * The entry an iterator is on.  It lives inside the iterator, at one address
 * for the iterator's life (kv_iter_current), and every move rewrites it, so
 * a caller that reads keys and values at every step reads this instead of
 * making a call per field.  key and val are as kv_iter_key/kv_iter_value's.
 */
typedef struct kv_iter_cur {
	const void *key;
	const void *val;
	size_t klen;
	size_t vlen;
	bool valid;
} kv_iter_cur;

/* Opens an iterator positioned on the first key >= lo. */
int kv_iter_open(const void *lo, size_t lol, const void *hi, size_t hil, kv_iter **it);
/* First key >= k (and >= lo); k NULL = the first key of the range. */
int kv_iter_seek(kv_iter *it, const void *k, size_t kl);
/* The last key of the range. */
int kv_iter_seek_last(kv_iter *it);
int kv_iter_next(kv_iter *it);
/*
 * kv_iter_next when the next entry is in the iterator's private copy of its
 * leaf, in range and inline: moves there and returns true.  It reads no
 * shared memory, takes no lock and cannot fail or PANIC, so a caller may
 * skip its per-call checks for it.  Otherwise returns false, the iterator
 * unchanged: call kv_iter_next.
 */
bool kv_iter_next_local(kv_iter *it);
int kv_iter_prev(kv_iter *it);
bool kv_iter_valid(const kv_iter *it);
const kv_iter_cur *kv_iter_current(const kv_iter *it);
void kv_iter_key(const kv_iter *it, const void **k, size_t *kl);
void kv_iter_value(const kv_iter *it, const void **v, size_t *vl);
void kv_iter_close(kv_iter *it);

/* ---------------------------------------------------------------- other trees */

/*
 * Where a read of the tree found a key, or its place: the leaf's block (0:
 * the read did not look at the tree) and LSN then, the slot, whether the
 * key was there.  A later batch's put of the key tries that leaf first
 * (kv_batch_put_hinted): a transaction writes the keys it read.
 */
typedef struct kv_leaf_hint {
	wr_lsn lsn;
	wr_blkno blk;
	uint16_t slot;
	bool found;
} kv_leaf_hint;

/*
 * The same calls on the tree of relation @rel: a key space's (kv_space.h
 * below), or KV_CATALOG_REL.  A batch may hold operations on several trees;
 * its commit is atomic across all of them.  Writes to a tree whose key
 * space was dropped fail with WALRUS_ENOTFOUND (checked under the tree
 * lock); reads of a dropped space are the caller's to prevent (the engine
 * keeps a drop waiting while a call reads the space: kv_space_drop).
 */
int kv_get_in(wr_relid rel, const void *k, size_t kl, void **v, size_t *vl);
int kv_get_into_in(wr_relid rel, const void *k, size_t kl, void *buf, size_t cap, size_t *vl);
int kv_put_in(wr_relid rel, const void *k, size_t kl, const void *v, size_t vl, int durability);
int kv_delete_in(wr_relid rel, const void *k, size_t kl, int durability);
int kv_batch_put_in(kv_batch *b, wr_relid rel, const void *k, size_t kl, const void *v, size_t vl);
/* kv_batch_put_in of a key a read found at @hint (kv_snap_get_hinted): the
 * commit puts it there when that leaf is unchanged, else descends. */
int kv_batch_put_hinted(kv_batch *b, wr_relid rel, const void *k, size_t kl, const void *v,
                        size_t vl, const kv_leaf_hint *hint);
int kv_batch_delete_in(kv_batch *b, wr_relid rel, const void *k, size_t kl);
/* A new tree in relation @rel, whose file exists and is empty (kv_space.c). */
int kv_batch_create_tree(kv_batch *b, wr_relid rel);
int kv_iter_open_in(wr_relid rel, const void *lo, size_t lol, const void *hi, size_t hil,
                    kv_iter **it);
/* ---------------------------------------------------------------- key spaces */

/*
 * Named key spaces (kv_space.c): each an ordered key space of its own, a
 * tree in its own relation (KV_FIRST_SPACE_REL and up), named in the
 * catalog's tree (KV_CATALOG_REL).  Names are 1..KV_SPACE_NAME_MAX bytes of
 * letters, digits, '_', '-' and '.' (EINVAL otherwise).  Create and drop
 * are durable batches (KV_SYNC); a drop's file goes once every call
 * reading the space has finished (the engine's kv_set_drop_wait).
 */
#define KV_CATALOG_REL     2u
#define KV_FIRST_SPACE_REL 16u
#define KV_SPACE_NAME_MAX  64u
int kv_space_check_name(const char *name);
/* The space's relation; ENOTFOUND "no key space "NAME"". */
int kv_space_lookup(const char *name, wr_relid *rel);
/* EEXIST when it exists. */
int kv_space_create(const char *name, wr_relid *rel);
/* ENOTFOUND when it does not exist. */
int kv_space_drop(const char *name);
/* WALRUS_OK while relation @rel is a space's, ENOTFOUND once dropped. */
int kv_space_live(wr_relid rel);
/* The name of the space of relation @rel into @name (ENOTFOUND, ETOOBIG). */
int kv_space_name(wr_relid rel, char *name, size_t cap);
typedef int (*kv_space_fn)(void *arg, const char *name, wr_relid rel);
/* Calls @fn for each space, in name order; stops at its first error. */
int kv_space_list(kv_space_fn fn, void *arg);
/* Every space, in name order, in one malloc'd array (*n of them; free it). */
typedef struct kv_space_ent {
	wr_relid rel;
	char name[KV_SPACE_NAME_MAX + 1];
} kv_space_ent;
int kv_space_all(kv_space_ent **out, size_t *n);
/* A tree's size, from its meta page. */
typedef struct kv_shape {
	uint64_t keys;
	uint32_t pages, free_pages;
} kv_shape;
int kv_tree_shape(wr_relid rel, kv_shape *out);
/* At start, after recovery, on a primary: removes the files of relations
 * no space names (a create that never committed, a drop cut by a crash). */
int kv_space_cleanup(void);
/* Bumped by every drop: a caller that saw another value checks its space again. */
uint64_t kv_drop_gen(void);
/* Called before a dropped space's files go (on a primary and in redo):
 * returns once no call reads relation @rel. */
typedef void (*kv_drop_wait_fn)(wr_relid rel);
void kv_set_drop_wait(kv_drop_wait_fn fn);

/* ---------------------------------------------------------------- verify and stats */

/* Called for each problem found, with the block it concerns. */
typedef void (*kv_verify_report_fn)(void *arg, wr_blkno blk, const char *msg);
typedef struct kv_verify_result {
	uint64_t errors;           /* problems reported */
	uint64_t pages;            /* blocks of the tree (meta page included) */
	uint64_t leaves, internal; /* tree nodes */
	uint64_t overflow;         /* pages of live overflow chains */
	uint64_t free;             /* pages on the free list */
	uint64_t keys;
	uint64_t prefix_bytes; /* key bytes the leaves leave out (each entry's share of its
	                          leaf's prefix, summed) */
	uint32_t height;
	uint64_t unused_tail; /* blocks past the tree's end: grown ahead or left by a crash (used
	                         next) */
} kv_verify_result;
/*
 * Reads every block of the tree through the buffer pool (checksums) and
 * checks the tree's invariants: key order in pages, parent/child key
 * bounds, levels, sibling links, overflow chains, the free list, the key
 * count, and that every block is used exactly once.  Returns WALRUS_OK when
 * clean, WALRUS_ECORRUPT when problems were reported, another error when it
 * could not run.  @fn may be NULL; @r may be NULL.
 */
int kv_verify(kv_verify_report_fn fn, void *arg, kv_verify_result *r);
int kv_verify_in(wr_relid rel, kv_verify_report_fn fn, void *arg, kv_verify_result *r);

/*
 * Compaction (kv_compact.c): packs the leaves, moves the tree to the front of
 * its file and lowers the tree's end, in small batches under the tree lock.
 * kv_compact_give_back, once a checkpoint has written what that freed,
 * punches the blocks past the tree's end out of the file (*blocks of them).
 */
typedef struct kv_compact_result {
	uint64_t leaves_merged;   /* leaves taken whole by their left sibling, and freed */
	uint64_t leaves_poured;   /* leaves that gave their first entries to their left sibling */
	uint64_t pages_moved;     /* nodes moved to free pages nearer the file's start */
	uint64_t batches;         /* batches that changed the tree */
	uint64_t free_list_reads; /* times the free list was read from its pages */
	uint32_t blocks_before, blocks_after; /* the tree's end, meta page included */
} kv_compact_result;
int kv_compact(kv_compact_result *r);
int kv_compact_give_back(uint64_t *blocks);
int kv_compact_in(wr_relid rel, kv_compact_result *r);
int kv_compact_give_back_in(wr_relid rel, uint64_t *blocks);

typedef struct kv_stats {
	uint64_t gets, puts, deletes, batches;
	uint64_t batch_aborts; /* batches that failed and were undone */
	uint64_t splits, pages_freed, pages_reused;
	uint64_t fastpath_hits; /* puts into the rightmost leaf that skipped the descent */
	uint64_t hint_hits;     /* transactions' puts into the leaf their read found, no descent */
	uint64_t prefetch_batches; /* batches whose leaves were read before the tree lock */
	uint64_t prefetch_leaves;  /* leaves those batches found missing from the pool */
	uint64_t shifts;      /* full leaves that gave entries to a sibling instead of splitting */
	uint64_t file_grows;  /* times the data file grew (by up to 1 MiB) for new pages */
	uint64_t size_checks; /* times a writer asked the data file's size */
	uint64_t optimistic_reads;     /* gets answered by a peek at the leaf (no pin, no lock) */
	uint64_t optimistic_retries;   /* peeks that a writer overlapped: read again under a lock */
	uint64_t mapped_reads;         /* of the optimistic gets, answered by the file's mapping */
	uint64_t mapped_retries;       /* mapped peeks a load of the leaf overlapped */
	uint64_t mapped_prefetches;    /* mapped leaves read ahead whole (judged not in memory) */
	uint64_t node_copies_taken;    /* internal nodes a backend copied for its descents */
	uint64_t node_copies_rationed; /* level-1 nodes read without a copy: copies did not pay */
	uint64_t compactions;          /* kv_compact runs that finished */
	uint64_t compact_leaves_merged, compact_pages_moved; /* by them */
	uint64_t
	    compact_blocks_given_back; /* punched out of the data file (kv_compact_give_back) */
	uint64_t scan_ahead;    /* leaves handed to read streams ahead of iterators, compaction */
	uint64_t scan_ahead_io; /* of them, read (io_uring) or advised (sync): not in the pool */
	uint32_t height;        /* from the meta page */
	uint64_t pages;         /* blocks in use, meta page included */
	uint64_t free_pages, keys;
} kv_stats;
/* Counters since shared memory was created, and the tree's shape (zeros if no tree). */
void kv_get_stats(kv_stats *s);

/* ---------------------------------------------------------------- snapshots */

/*
 * Snapshots (kv_mvcc.c, kv_view.c).  Every batch gets a commit sequence
 * number (csn) under the tree lock; a snapshot reads as of the last one
 * committed when it was taken: all of a batch or none of it.  While any
 * snapshot is live, writers note in region "mvcc" (the version store: a
 * ring of snapshot_memory bytes) the value each key had before their
 * batch; pruned once every live snapshot sees the batch.  Taking or
 * releasing a snapshot takes the region's spinlock for O(1) (it may wait
 * for a batch that began before any snapshot existed to end); reads take no
 * lock writers take.  Reads through a snapshot whose versions were dropped
 * (the ring full, or older than old_snapshot_threshold) fail with
 * WALRUS_ESNAPSHOT.  Versions live in shared memory only: a restart ends
 * every snapshot, and WAL, checkpoints, backups and standbys never see
 * them.
 */
/* EINVAL for an empty key, ETOOBIG over KV_MAX_KEY. */
int kv_check_key(size_t kl);
/* The keys' order: memcmp, a prefix first. */
int kv_key_order(const void *a, size_t al, const void *b, size_t bl);

size_t kv_mvcc_shmem_size(const wr_options *o);
int kv_mvcc_shmem_init(const wr_options *o);
int kv_mvcc_attach(void);

typedef struct kv_snap {
	uint64_t csn;      /* sees batches up to this one */
	uint64_t from;     /* ring position of the first version it may need */
	uint64_t taken_us; /* wall clock */
	wr_lsn lsn;        /* the WAL end of the last batch it sees */
	uint32_t slot;     /* in the snapshot table */
	bool live;
} kv_snap;
/* ELIMIT when 4096 snapshots are live. */
int kv_snap_take(kv_snap *s);
void kv_snap_release(kv_snap *s);
/* Every snapshot process @pid holds: a process detaching with handles left open. */
void kv_snap_release_pid(uint32_t pid);
/* WALRUS_ESNAPSHOT when @s lost versions, or outlived old_snapshot_threshold. */
int kv_snap_check(const kv_snap *s);
/* The last committed csn. */
uint64_t kv_mv_visible(void);
/* No version was noted since @s was taken: the tree is what @s sees, as
 * long as this stays true (a reader checks before and after its read). */
bool kv_mv_none_after(const kv_snap *s);

/* A version: the value a key had before batch csn (absent: none). */
typedef struct kv_version {
	bool found, absent;
	const char *val; /* in the ring: valid while the snapshot lives */
	uint32_t vlen;
	uint64_t csn;
} kv_version;
/* The earliest version after @s of key @k of tree @rel, if any (found);
 * then kv_snap_check. */
int kv_mv_lookup(const kv_snap *s, wr_relid rel, const void *k, size_t kl, kv_version *out);
typedef int (*kv_mv_fn)(void *arg, wr_relid rel, const char *k, uint16_t kl, const kv_version *v);
/* Calls @fn for each version after @s from ring position *pos (s->from at
 * first) to the ring's head, in csn order, and moves *pos there. */
int kv_mv_scan(const kv_snap *s, uint64_t *pos, kv_mv_fn fn, void *arg);

/* Gets as of @s of tree @rel (kv_get / kv_get_into's contract). */
int kv_snap_get(const kv_snap *s, wr_relid rel, const void *k, size_t kl, void **v, size_t *vl);
int kv_snap_get_into(const kv_snap *s, wr_relid rel, const void *k, size_t kl, void *buf,
                     size_t cap, size_t *vl);
/* kv_snap_get (@v not NULL) or kv_snap_get_into (@buf, @cap), with the
 * leaf's hint in *@hint. */
int kv_snap_get_hinted(const kv_snap *s, wr_relid rel, const void *k, size_t kl, void **v,
                       void *buf, size_t cap, size_t *vl, kv_leaf_hint *hint);

/*
 * A view iterator: the keys of [lo, hi) as of @s, with @overlay over them
 * (a transaction's own writes: NULL for none), each key once, in order.
 * The overlay is copied at open.  Same moves as kv_iter; @s must stay live.
 */
typedef struct kv_overlay_ent {
	wr_relid rel; /* the tree (a transaction's entries are by tree, then key) */
	const char *k, *v;
	uint16_t kl;
	uint32_t vl;
	bool deleted;
} kv_overlay_ent;
typedef struct kv_viter kv_viter;
/* @ov sorted by key, distinct; the keys of tree @rel. */
int kv_viter_open(const kv_snap *s, wr_relid rel, const kv_overlay_ent *ov, size_t nov,
                  const void *lo, size_t lol, const void *hi, size_t hil, kv_viter **it);
int kv_viter_seek(kv_viter *it, const void *k, size_t kl);
int kv_viter_seek_last(kv_viter *it);
int kv_viter_next(kv_viter *it);
/*
 * kv_viter_next when the next visible key is the tree iterator's next entry
 * in its private leaf copy, with no version or overlay entry up to it:
 * moves there and returns true, reading no shared memory.  Otherwise
 * returns false, having perhaps moved the tree iterator one entry on, which
 * kv_viter_next then takes from there.
 */
bool kv_viter_next_local(kv_viter *it);
int kv_viter_prev(kv_viter *it);
const kv_iter_cur *kv_viter_current(const kv_viter *it);
void kv_viter_close(kv_viter *it);

/*
 * kv_batch_commit with @check(@arg) called under the tree lock before the
 * batch is applied: an error from it (a transaction's conflict) is
 * returned and nothing is written.  @b may be empty (then only @check).
 * @ending (NULL: none): the snapshot of the transaction @b commits, which
 * is read no more (its iterators closed, released after the commit).
 */
typedef int (*kv_commit_check_fn)(void *arg);
int kv_batch_commit_checked(kv_batch *b, int durability, kv_commit_check_fn check, void *arg,
                            const kv_snap *ending, wr_lsn *commit_lsn);

typedef struct kv_mv_stats {
	uint64_t snapshots;     /* live */
	uint64_t oldest_age_us; /* of the oldest live one, 0 none */
	uint64_t csn, horizon;  /* last committed; oldest a live snapshot reads as of */
	uint64_t versions, version_bytes, ring_bytes; /* held now; the ring's size */
	uint64_t noted, pruned, dropped;              /* versions made; given back; lost early */
	uint64_t taken;                               /* snapshots taken */
} kv_mv_stats;
void kv_mv_get_stats(kv_mv_stats *st);

/* ---------------------------------------------------------------- test hooks */

#ifdef WALRUS_TEST_HOOKS /* test builds only (meson -Dtest_hooks=true) */
/* Exit code of a process stopped by kv_test_crash_after_records. */
#define KV_TEST_CRASH_EXIT 77
/*
 * This process flushes the WAL and _exit()s right after inserting the n-th
 * record of a batch (n counts from 1; 0 turns the hook off), leaving the
 * batch unfinished in a durable WAL: recovery must discard it.
 */
void kv_test_crash_after_records(int n);
/* kv_compact flushes the WAL and _exit()s after its n-th batch that changed
 * the tree (0: off): a compaction stopped between two of its batches. */
void kv_test_compact_crash_after(int batches);
/* kv_compact calls @fn(@arg) after each of its batches, outside the tree
 * lock (NULL: nothing): another writer's batches, at known points. */
void kv_test_compact_between(void (*fn)(void *), void *arg);
/* A get calls @fn(@arg) after reading a leaf through the file's mapping and
 * before checking that no buffer took the leaf meanwhile (NULL: nothing). */
void kv_test_mapped_between(void (*fn)(void *), void *arg);
/* Iterators of this process look ahead as if every leaf came slowly from
 * storage, and never stop (true), or as they judge (false): look-ahead
 * without timing. */
void kv_test_iter_ahead_always(bool on);
/* Batches of this thread judge every read their apply waited for as slow
 * (true: the leaf prefetch turns on whenever the apply missed the pool), or
 * time them (false). */
void kv_test_batch_prefetch_slow(bool on);
/* Backends of this process keep at most @n node copies (1..KV_NODE_COPIES;
 * KV_NODE_COPIES: as built): a tree with more level-1 nodes than that,
 * small enough for a test. */
void kv_test_copy_places(int n);
/* Mapped peeks of this process judged slow (1), fast (0), or timed (-1, as
 * built): whether they prefetch, without timing. */
void kv_test_map_judge(int mode);
/* Takes the snapshot table's spinlock and never gives it back: a process
 * killed while it holds it. */
void kv_test_snap_lock_hold(void);
#endif

#endif /* WALRUS_KV_H */
