/*
 * kv_batch.c - write batches: collecting operations, and applying them
 * atomically under the tree lock.
 *
 * Commit: take the tree lock; apply every operation in memory, logging as
 * it goes (kv_modify.c, kv_write.c); insert the commit record; release the
 * pages and the tree lock; only then wait for the WAL flush, so the next
 * writer works while this one waits and one flush serves them all (group
 * commit).  A failure on the way undoes the batch in memory (kvw_abort).
 *
 * Interface: kv.h (kv_batch_*, kv_put, kv_delete).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buffer/buffer.h"
#include "kv/kv_int.h"

enum { OP_PUT = 1, OP_DELETE = 2, OP_CREATE = 3, OP_DROP = 4 };

/* One operation; key and value point into the batch's arena or the caller's memory. */
typedef struct kv_op {
	uint8_t type;
	wr_relid rel; /* the tree */
	uint16_t kl;
	uint32_t vl;
	size_t koff, voff; /* in the arena */
	const char *k, *v; /* resolved at commit */
	kv_leaf_hint hint; /* a put's: blk 0 for none */
} kv_op;

struct kv_batch {
	kv_op *ops;
	size_t n, cap;
	char *arena;
	size_t used, acap;
};

/* ---------------------------------------------------------------- building */

kv_batch *kv_batch_new(void)
{
	return calloc(1, sizeof(kv_batch));
}

static int check_value(size_t vl)
{
	if (vl > KV_MAX_VALUE)
		return wr_error(WALRUS_ETOOBIG, "value of %zu bytes is over the limit of %u bytes",
		                vl, KV_MAX_VALUE);
	return WALRUS_OK;
}

static int arena_add(kv_batch *b, const void *p, size_t len, size_t *off)
{
	if (len > SIZE_MAX - b->used ||
	    wr_grow(&b->arena, &b->acap, b->used + len, 1, 4096) != WALRUS_OK)
		return wr_error(WALRUS_ENOMEM, "out of memory adding %zu bytes to a batch", len);
	*off = b->used;
	if (len > 0)
		memcpy(b->arena + b->used, p, len);
	b->used += len;
	return WALRUS_OK;
}

static int add_op(kv_batch *b, uint8_t type, wr_relid rel, const void *k, size_t kl, const void *v,
                  size_t vl)
{
	if (wr_grow(&b->ops, &b->cap, b->n + 1, sizeof(*b->ops), 16) != WALRUS_OK)
		return wr_error(WALRUS_ENOMEM, "out of memory growing a batch");
	kv_op op = {.type = type, .rel = rel, .kl = (uint16_t)kl, .vl = (uint32_t)vl};
	size_t mark = b->used;
	int rc = arena_add(b, k, kl, &op.koff);
	if (rc == WALRUS_OK)
		rc = arena_add(b, v, vl, &op.voff);
	if (rc != WALRUS_OK) {
		b->used = mark;
		return rc;
	}
	b->ops[b->n++] = op;
	return WALRUS_OK;
}

int kv_batch_put(kv_batch *b, const void *k, size_t kl, const void *v, size_t vl)
{
	return kv_batch_put_in(b, KV_REL, k, kl, v, vl);
}

int kv_batch_delete(kv_batch *b, const void *k, size_t kl)
{
	return kv_batch_delete_in(b, KV_REL, k, kl);
}

int kv_batch_put_in(kv_batch *b, wr_relid rel, const void *k, size_t kl, const void *v, size_t vl)
{
	int rc = kv_check_key(kl);
	if (rc == WALRUS_OK)
		rc = check_value(vl);
	return rc == WALRUS_OK ? add_op(b, OP_PUT, rel, k, kl, v, vl) : rc;
}

int kv_batch_put_hinted(kv_batch *b, wr_relid rel, const void *k, size_t kl, const void *v,
                        size_t vl, const kv_leaf_hint *hint)
{
	int rc = kv_batch_put_in(b, rel, k, kl, v, vl);
	if (rc == WALRUS_OK && hint != NULL)
		b->ops[b->n - 1].hint = *hint;
	return rc;
}

int kv_batch_delete_in(kv_batch *b, wr_relid rel, const void *k, size_t kl)
{
	int rc = kv_check_key(kl);
	return rc == WALRUS_OK ? add_op(b, OP_DELETE, rel, k, kl, NULL, 0) : rc;
}

int kv_batch_create_tree(kv_batch *b, wr_relid rel)
{
	return add_op(b, OP_CREATE, rel, NULL, 0, NULL, 0);
}

int kv_batch_drop_tree(kv_batch *b, wr_relid rel)
{
	return add_op(b, OP_DROP, rel, NULL, 0, NULL, 0);
}

size_t kv_batch_count(const kv_batch *b)
{
	return b->n;
}

void kv_batch_clear(kv_batch *b)
{
	b->n = 0;
	b->used = 0;
}

void kv_batch_free(kv_batch *b)
{
	if (b == NULL)
		return;
	free(b->ops);
	free(b->arena);
	free(b);
}

/* ---------------------------------------------------------------- applying */

/*
 * Writes "128MB" (or "1536kB") for a pool of @pages buffers: how
 * shared_buffers is set.  @round_up: to the next MB (a size to advise).
 */
static void pool_size_text(uint64_t pages, bool round_up, char *buf, size_t len)
{
	uint64_t kb = pages * (WR_PAGE_SIZE / 1024);
	if (round_up || kb % 1024 == 0)
		snprintf(buf, len, "%lluMB", (unsigned long long)((kb + 1023) / 1024));
	else
		snprintf(buf, len, "%llukB", (unsigned long long)kb);
}

/*
 * The pages the batch keeps pinned: every overflow page of its values, and
 * KV_PIN_RESERVE for the tree's pages.  A batch may pin a quarter of the
 * pool (kv_write.c says why), so the largest value is
 * (shared_buffers / 32kB - KV_PIN_RESERVE) * KV_OVF_CHUNK bytes: below
 * KV_MAX_VALUE unless shared_buffers is 259MB or more.  Over the limit, fail
 * before touching anything, naming the shared_buffers that would do;
 * otherwise the writer checks as it goes (kv_write.c).
 */
_Static_assert(KV_MAX_VALUE == WALRUS_MAX_VALUE, "the public limit is the tree's");
_Static_assert(WALRUS_MAX_VALUE_DEFAULT_POOL ==
                   ((128u << 20) / WR_PAGE_SIZE / 4 - KV_PIN_RESERVE) * KV_OVF_CHUNK,
               "walrus.h gives the largest value of the default pool");

static int precheck(const kv_op *ops, size_t n)
{
	uint64_t pages = 0;
	uint32_t limit = buf_nbuffers() / 4;
	for (size_t i = 0; i < n; i++)
		if (ops[i].type == OP_PUT && !kvl_fits_inline(ops[i].kl, ops[i].vl))
			pages += (ops[i].vl + KV_OVF_CHUNK - 1) / KV_OVF_CHUNK;
	/* Without overflow pages the writer's own check is enough. */
	if (pages == 0)
		return WALRUS_OK;
	pages += KV_PIN_RESERVE;
	if (pages <= limit)
		return WALRUS_OK;
	char need[32], have[32];
	pool_size_text(pages * 4, true, need, sizeof(need));
	pool_size_text(buf_nbuffers(), false, have, sizeof(have));
	if (n == 1)
		return wr_error(
		    WALRUS_ETOOBIG,
		    "a value of %u bytes needs shared_buffers of at least %s (a write "
		    "may pin a quarter of shared_buffers, and this one needs %llu pages); "
		    "shared_buffers is %s",
		    ops[0].vl, need, (unsigned long long)pages, have);
	return wr_error(WALRUS_ETOOBIG,
	                "batch too large: its values need %llu pages pinned at once, over a "
	                "quarter of shared_buffers (%u pages): it needs shared_buffers of at "
	                "least %s, and shared_buffers is %s",
	                (unsigned long long)pages, limit, need, have);
}

/*
 * Every tree the operations name, other than KV_REL and the catalog's,
 * must be a live key space's (kv_space.c) or one the batch creates, looked
 * at under the tree lock: a space dropped since the caller opened it takes
 * no write.  Each run of operations on one tree is looked up once.
 */
static bool created_here(const kv_op *ops, size_t n, wr_relid rel)
{
	for (size_t i = 0; i < n; i++)
		if (ops[i].type == OP_CREATE && ops[i].rel == rel)
			return true;
	return false;
}

static int check_trees(const kv_op *ops, size_t n)
{
	wr_relid last = KV_REL;
	for (size_t i = 0; i < n; i++) {
		wr_relid rel = ops[i].rel;
		if (rel == KV_REL || rel == KV_CATALOG_REL || rel == last ||
		    ops[i].type == OP_CREATE || ops[i].type == OP_DROP || created_here(ops, n, rel))
			continue;
		int rc = kv_space_live(rel);
		if (rc != WALRUS_OK)
			return rc;
		last = rel;
	}
	return WALRUS_OK;
}

/* ---------------------------------------------------------------- leaf prefetch */

/*
 * Applied under the tree lock one after another, a batch's puts and deletes
 * read the leaves the pool lacks one at a time: at the device's rate for one
 * read in flight, while the tree lock keeps every other writer waiting.  A
 * batch of PF_MIN_OPS or more whose tree was found slow to read first finds
 * each key's leaf (a descent to level 1, no leaf read), sorts the blocks and
 * reads them through a read stream: in flight together (io_uring, or the
 * kernel's reads behind sync's advice), before the exclusive lock.  The
 * apply then finds them in the pool.
 *
 * Whether it pays is measured by the backend's own reads during the apply
 * (buf_my_read_counts): a batch applied without prefetch that waited for
 * PF_MIN_MISSES reads or more averaging PF_SLOW_NS (the device's, not the
 * page cache's) turns it on; while on, every PF_PROBE-th batch goes without
 * it to measure again, and a prefetch that found every leaf in the pool
 * turns it off.  A hint only: the apply reads and checks whatever it needs,
 * and an error here is dropped (the apply meets it again and reports it).
 *
 * The tree lock is held shared meanwhile: a key space cannot be dropped
 * (its files removed) while its blocks are read, and check_trees says which
 * trees are live.
 */
#define PF_MIN_OPS    16
#define PF_MIN_MISSES 8
#define PF_SLOW_NS    30000
#define PF_PROBE      32
#define PF_DEPTH      64

static WR_TLS struct {
	bool on;
	uint32_t batches; /* prefetched since the last probe */
} pf;

static int cmp_blk(const void *a, const void *b)
{
	wr_blkno x = *(const wr_blkno *)a, y = *(const wr_blkno *)b;
	return (x > y) - (x < y);
}

/* The leaves of ops[from ..] on the tree of ops[from], sorted, unique; returns the count. */
static uint32_t plan_run(const kv_op *ops, size_t n, size_t from, size_t *end, wr_blkno *blk)
{
	wr_relid rel = ops[from].rel;
	uint32_t nb = 0;
	kv_leaf_plan plan = {.cap = 1};
	kv_cur_rel = rel;
	size_t i = from;
	for (; i < n && ops[i].rel == rel; i++) {
		if ((ops[i].type != OP_PUT && ops[i].type != OP_DELETE) || ops[i].hint.blk != 0)
			continue;
		kv_key k = {.p = ops[i].k, .len = ops[i].kl};
		plan.blk = &blk[nb];
		if (kv_plan_leaves(&k, KV_SEEK_GE, &plan) != WALRUS_OK) {
			wr_error_clear();
			break;
		}
		nb += (uint32_t)plan.n;
	}
	*end = i;
	qsort(blk, nb, sizeof(*blk), cmp_blk);
	uint32_t u = 0;
	for (uint32_t j = 0; j < nb; j++)
		if (u == 0 || blk[j] != blk[u - 1])
			blk[u++] = blk[j];
	return u;
}

/* Reads blk[0 .. nb) of @rel into the pool; returns how many were not there. */
static uint64_t read_run(wr_relid rel, const wr_blkno *blk, uint32_t nb)
{
	buf_stream *s;
	if (buf_stream_open_list(&s, rel, blk, nb, PF_DEPTH) != WALRUS_OK) {
		wr_error_clear();
		return 0;
	}
	int buf, rc;
	wr_blkno b;
	while ((rc = buf_stream_next(s, &buf, &b)) != WALRUS_ENOTFOUND) {
		if (rc == WALRUS_OK)
			buf_release(buf);
		else
			wr_error_clear();
	}
	buf_stream_stats st;
	buf_stream_get_stats(s, &st);
	buf_stream_close(s);
	return st.io_method == WR_IO_URING ? st.blocks : st.submitted;
}

/* Brings the leaves of @ops into the pool; false when none was missing. */
static bool prefetch_leaves(const kv_op *ops, size_t n)
{
	wr_blkno *blk = malloc(n * sizeof(*blk));
	if (blk == NULL)
		return true;
	uint64_t missing = 0;
	wr_relid cur = kv_cur_rel;
	rw_lock_shared(&kv_sh->tree_lock);
	bool live = check_trees(ops, n) == WALRUS_OK;
	if (live) {
		for (size_t i = 0; i < n;) {
			if (ops[i].type == OP_CREATE || ops[i].type == OP_DROP ||
			    created_here(ops, n, ops[i].rel)) {
				i++;
				continue;
			}
			size_t end;
			uint32_t nb = plan_run(ops, n, i, &end, blk);
			missing += read_run(ops[i].rel, blk, nb);
			i = WR_MAX(end, i + 1);
		}
	} else {
		wr_error_clear(); /* the commit checks again and reports it */
	}
	rw_unlock(&kv_sh->tree_lock);
	kv_cur_rel = cur;
	free(blk);
	if (!live)
		return true; /* judged by the next batch that applies */
	atomic_fetch_add_explicit(&kv_sh->prefetch_batches, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&kv_sh->prefetch_leaves, missing, memory_order_relaxed);
	return missing > 0;
}

/* Before the tree lock: prefetches when it pays; *measure says to judge the apply. */
static void prefetch_maybe(const kv_op *ops, size_t n, bool *measure)
{
	*measure = n >= PF_MIN_OPS;
	if (!*measure || !pf.on)
		return;
	if (++pf.batches >= PF_PROBE) {
		pf.batches = 0; /* this one goes without, measured */
		return;
	}
	*measure = false;
	if (!prefetch_leaves(ops, n))
		pf.on = false; /* the pool held them all */
}

#ifdef WALRUS_TEST_HOOKS
static WR_TLS bool pf_slow;

void kv_test_batch_prefetch_slow(bool on)
{
	pf_slow = on;
}
#define PF_ALL_SLOW() pf_slow
#else
#define PF_ALL_SLOW() false
#endif

static void prefetch_judge(buf_my_reads before)
{
	buf_my_reads now = buf_my_read_counts();
	uint64_t misses = now.n - before.n;
	pf.on = misses >= PF_MIN_MISSES &&
	        (PF_ALL_SLOW() || (now.ns - before.ns) / misses >= PF_SLOW_NS);
}

/* Applies the operations; *notfound counts deletes of absent keys, *begun
 * says whether the batch began (then a failure is the caller's to undo). */
static int apply_ops(const kv_op *ops, size_t n, size_t *notfound, bool *begun)
{
	int rc = check_trees(ops, n);
	if (rc != WALRUS_OK)
		return rc;
	kvw_batch_reset();
	*begun = true;
	for (size_t i = 0; rc == WALRUS_OK && i < n; i++) {
		if (ops[i].type == OP_CREATE) {
			rc = kvw_tree_create(ops[i].rel);
			continue;
		}
		if (ops[i].type == OP_DROP) {
			rc = kvw_tree_drop(ops[i].rel);
			continue;
		}
		rc = kvw_tree_use(ops[i].rel);
		if (rc != WALRUS_OK)
			break;
		if (ops[i].type == OP_PUT) {
			rc = kvm_put(ops[i].k, ops[i].kl, ops[i].v, ops[i].vl,
			             ops[i].hint.blk != 0 ? &ops[i].hint : NULL);
		} else {
			rc = kvm_delete(ops[i].k, ops[i].kl);
			if (rc == WALRUS_ENOTFOUND) {
				(*notfound)++;
				rc = WALRUS_OK;
			}
		}
	}
	return rc;
}

static void count_ops(const kv_op *ops, size_t n)
{
	uint64_t puts = 0, deletes = 0;
	for (size_t i = 0; i < n; i++) {
		puts += ops[i].type == OP_PUT;
		deletes += ops[i].type == OP_DELETE;
	}
	atomic_fetch_add(&kv_sh->puts, puts);
	atomic_fetch_add(&kv_sh->deletes, deletes);
	atomic_fetch_add(&kv_sh->batches, 1);
}

/*
 * Applies and commits @ops under the tree lock, then waits for durability
 * outside it.  @check (may be NULL) runs first under the lock: its error
 * leaves everything untouched.  The batch's csn is published once its
 * pages are committed (kv_mvcc.c).
 */
static void resolve(kv_batch *b)
{
	for (size_t i = 0; i < b->n; i++) {
		b->ops[i].k = b->arena + b->ops[i].koff;
		b->ops[i].v = b->arena + b->ops[i].voff;
	}
}

static int commit_ops(const kv_op *ops, size_t n, int durability, kv_commit_check_fn check,
                      void *arg, const kv_snap *ending, wr_lsn *lsn_out, size_t *notfound,
                      kv_batch *fill)
{
	wr_lsn lsn = 0;
	*notfound = 0;
	if (durability != KV_SYNC && durability != KV_ASYNC)
		return wr_error(WALRUS_EINVAL, "durability must be KV_SYNC or KV_ASYNC, not %d",
		                durability);
	int rc = precheck(ops, n);
	if (rc != WALRUS_OK)
		return rc;
	bool measure = false;
	if (fill == NULL)
		prefetch_maybe(ops, n, &measure);
	buf_my_reads before = buf_my_read_counts();
	rw_lock_excl(&kv_sh->tree_lock);
	if (check != NULL && (rc = check(arg)) != WALRUS_OK) {
		rw_unlock(&kv_sh->tree_lock);
		return rc;
	}
	if (fill != NULL) { /* the check built the batch */
		resolve(fill);
		ops = fill->ops;
		n = fill->n;
	}
	if (n == 0) {
		rw_unlock(&kv_sh->tree_lock);
		count_ops(ops, 0);
		return WALRUS_OK;
	}
	kv_mv_batch_begin(ending);
	bool begun = false;
	rc = apply_ops(ops, n, notfound, &begun);
	if (rc == WALRUS_OK)
		rc = kvw_commit(&lsn);
	if (rc != WALRUS_OK && begun)
		kvw_abort();
	kv_mv_batch_end(rc == WALRUS_OK, lsn);
	rw_unlock(&kv_sh->tree_lock);
	if (rc != WALRUS_OK)
		return rc;
	if (measure)
		prefetch_judge(before);
	count_ops(ops, n);
	if (lsn != 0 && durability == KV_SYNC)
		rc = wal_commit_durable(lsn); /* a synchronous standby's confirmation too */
	else if (lsn != 0)
		wal_flush_async(lsn);
	if (lsn_out != NULL)
		*lsn_out = lsn;
	return rc;
}

int kv_batch_commit(kv_batch *b, int durability, wr_lsn *commit_lsn)
{
	size_t notfound;
	if (commit_lsn != NULL)
		*commit_lsn = 0;
	resolve(b);
	return commit_ops(b->ops, b->n, durability, NULL, NULL, NULL, commit_lsn, &notfound, NULL);
}

int kv_batch_commit_checked(kv_batch *b, int durability, kv_commit_check_fn check, void *arg,
                            const kv_snap *ending, wr_lsn *commit_lsn)
{
	size_t notfound;
	if (commit_lsn != NULL)
		*commit_lsn = 0;
	resolve(b);
	return commit_ops(b->ops, b->n, durability, check, arg, ending, commit_lsn, &notfound,
	                  NULL);
}

int kv_batch_commit_built(kv_batch *b, int durability, kv_commit_check_fn build, void *arg,
                          wr_lsn *commit_lsn)
{
	size_t notfound;
	if (commit_lsn != NULL)
		*commit_lsn = 0;
	return commit_ops(NULL, 0, durability, build, arg, NULL, commit_lsn, &notfound, b);
}

int kv_put(const void *k, size_t kl, const void *v, size_t vl, int durability)
{
	return kv_put_in(KV_REL, k, kl, v, vl, durability);
}

int kv_delete(const void *k, size_t kl, int durability)
{
	return kv_delete_in(KV_REL, k, kl, durability);
}

int kv_put_in(wr_relid rel, const void *k, size_t kl, const void *v, size_t vl, int durability)
{
	size_t notfound;
	int rc = kv_check_key(kl);
	if (rc == WALRUS_OK)
		rc = check_value(vl);
	if (rc != WALRUS_OK)
		return rc;
	kv_op op = {
	    .type = OP_PUT, .rel = rel, .kl = (uint16_t)kl, .vl = (uint32_t)vl, .k = k, .v = v};
	return commit_ops(&op, 1, durability, NULL, NULL, NULL, NULL, &notfound, NULL);
}

int kv_delete_in(wr_relid rel, const void *k, size_t kl, int durability)
{
	size_t notfound;
	int rc = kv_check_key(kl);
	if (rc != WALRUS_OK)
		return rc;
	kv_op op = {.type = OP_DELETE, .rel = rel, .kl = (uint16_t)kl, .k = k};
	rc = commit_ops(&op, 1, durability, NULL, NULL, NULL, NULL, &notfound, NULL);
	if (rc == WALRUS_OK && notfound > 0)
		return wr_error(WALRUS_ENOTFOUND, "key not found");
	return rc;
}
