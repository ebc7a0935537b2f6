/*
 * api_kv.c - the key-value calls of include/walrus.h: handle checks, the
 * PANIC boundary, and translation to src/kv.  A PANIC inside a call
 * longjmps back to its boundary, so the application's process never
 * aborts: the call returns WALRUS_EPANIC and the instance restarts.
 */
#include "engine/api_int.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpointer/checkpointer.h"
#include "kv/kv.h"
#include "wal/wal.h"

struct walrus_batch {
	kv_batch *kb;
};

int api_check_flags(int flags, const char *fn)
{
	if (flags & ~(WALRUS_SYNC | WALRUS_ASYNC))
		return wr_error(WALRUS_EINVAL, "%s: unknown flags 0x%x", fn, (unsigned)flags);
	if ((flags & WALRUS_SYNC) && (flags & WALRUS_ASYNC))
		return wr_error(WALRUS_EINVAL, "%s: WALRUS_SYNC and WALRUS_ASYNC together", fn);
	return WALRUS_OK;
}

size_t walrus_max_key(void)
{
	return WALRUS_MAX_KEY;
}

int walrus_put(walrus *db, const void *key, size_t klen, const void *val, size_t vlen, int flags)
{
	int rc = api_check_flags(flags, "walrus_put");
	if (rc != WALRUS_OK)
		return rc;
	API_CALL(db, "walrus_put",
	         WRITABLE("walrus_put", kv_put(key, klen, val, vlen, DURABILITY(db, flags))));
}

int walrus_get(walrus *db, const void *key, size_t klen, void **val, size_t *vlen)
{
	if (val == NULL || vlen == NULL)
		return wr_error(WALRUS_EINVAL, "walrus_get: val and vlen must not be NULL");
	*val = NULL;
	*vlen = 0;
	API_CALL(db, "walrus_get", kv_get(key, klen, val, vlen));
}

int walrus_get_into(walrus *db, const void *key, size_t klen, void *buf, size_t cap, size_t *vlen)
{
	if (vlen == NULL || (buf == NULL && cap > 0))
		return wr_error(WALRUS_EINVAL, "walrus_get_into: vlen must not be NULL");
	API_CALL(db, "walrus_get_into", kv_get_into(key, klen, buf, cap, vlen));
}

int walrus_delete(walrus *db, const void *key, size_t klen, int flags)
{
	int rc = api_check_flags(flags, "walrus_delete");
	if (rc != WALRUS_OK)
		return rc;
	API_CALL(db, "walrus_delete",
	         WRITABLE("walrus_delete", kv_delete(key, klen, DURABILITY(db, flags))));
}

void walrus_free(void *p)
{
	free(p);
}

/* ---------------------------------------------------------------- in a key space */

int walrus_put_in(walrus *db, walrus_space *sp, const void *key, size_t klen, const void *val,
                  size_t vlen, int flags)
{
	wr_relid rel;
	int rc = api_check_flags(flags, "walrus_put_in");
	if (rc == WALRUS_OK)
		rc = api_space_rel(db, sp, "walrus_put_in", &rel);
	if (rc != WALRUS_OK)
		return rc;
	API_CALL(db, "walrus_put_in",
	         IN_SPACE(sp, WRITABLE("walrus_put_in", kv_put_in(rel, key, klen, val, vlen,
	                                                          DURABILITY(db, flags)))));
}

int walrus_get_in(walrus *db, walrus_space *sp, const void *key, size_t klen, void **val,
                  size_t *vlen)
{
	wr_relid rel;
	if (val == NULL || vlen == NULL)
		return wr_error(WALRUS_EINVAL, "walrus_get_in: val and vlen must not be NULL");
	*val = NULL;
	*vlen = 0;
	int rc = api_space_rel(db, sp, "walrus_get_in", &rel);
	if (rc != WALRUS_OK)
		return rc;
	API_CALL(db, "walrus_get_in", IN_SPACE(sp, kv_get_in(rel, key, klen, val, vlen)));
}

int walrus_get_into_in(walrus *db, walrus_space *sp, const void *key, size_t klen, void *buf,
                       size_t cap, size_t *vlen)
{
	wr_relid rel;
	if (vlen == NULL || (buf == NULL && cap > 0))
		return wr_error(WALRUS_EINVAL, "walrus_get_into_in: vlen must not be NULL");
	int rc = api_space_rel(db, sp, "walrus_get_into_in", &rel);
	if (rc != WALRUS_OK)
		return rc;
	API_CALL(db, "walrus_get_into_in",
	         IN_SPACE(sp, kv_get_into_in(rel, key, klen, buf, cap, vlen)));
}

int walrus_delete_in(walrus *db, walrus_space *sp, const void *key, size_t klen, int flags)
{
	wr_relid rel;
	int rc = api_check_flags(flags, "walrus_delete_in");
	if (rc == WALRUS_OK)
		rc = api_space_rel(db, sp, "walrus_delete_in", &rel);
	if (rc != WALRUS_OK)
		return rc;
	API_CALL(db, "walrus_delete_in",
	         IN_SPACE(sp, WRITABLE("walrus_delete_in",
	                               kv_delete_in(rel, key, klen, DURABILITY(db, flags)))));
}

/* ---------------------------------------------------------------- batches */

walrus_batch *walrus_batch_new(void)
{
	walrus_batch *b = calloc(1, sizeof(*b));
	if (b != NULL && (b->kb = kv_batch_new()) == NULL) {
		free(b);
		b = NULL;
	}
	if (b == NULL)
		wr_error(WALRUS_ENOMEM, "out of memory for a batch");
	return b;
}

int walrus_batch_put(walrus_batch *b, const void *key, size_t klen, const void *val, size_t vlen)
{
	if (b == NULL)
		return wr_error(WALRUS_EINVAL, "walrus_batch_put: batch is NULL");
	return kv_batch_put(b->kb, key, klen, val, vlen);
}

int walrus_batch_delete(walrus_batch *b, const void *key, size_t klen)
{
	if (b == NULL)
		return wr_error(WALRUS_EINVAL, "walrus_batch_delete: batch is NULL");
	return kv_batch_delete(b->kb, key, klen);
}

int walrus_batch_put_in(walrus_batch *b, walrus_space *sp, const void *key, size_t klen,
                        const void *val, size_t vlen)
{
	wr_relid rel;
	if (b == NULL)
		return wr_error(WALRUS_EINVAL, "walrus_batch_put_in: batch is NULL");
	int rc = api_space_batch_rel(sp, "walrus_batch_put_in", &rel);
	return rc == WALRUS_OK ? kv_batch_put_in(b->kb, rel, key, klen, val, vlen) : rc;
}

int walrus_batch_delete_in(walrus_batch *b, walrus_space *sp, const void *key, size_t klen)
{
	wr_relid rel;
	if (b == NULL)
		return wr_error(WALRUS_EINVAL, "walrus_batch_delete_in: batch is NULL");
	int rc = api_space_batch_rel(sp, "walrus_batch_delete_in", &rel);
	return rc == WALRUS_OK ? kv_batch_delete_in(b->kb, rel, key, klen) : rc;
}

size_t walrus_batch_count(const walrus_batch *b)
{
	return b == NULL ? 0 : kv_batch_count(b->kb);
}

void walrus_batch_clear(walrus_batch *b)
{
	if (b != NULL)
		kv_batch_clear(b->kb);
}

void walrus_batch_free(walrus_batch *b)
{
	if (b == NULL)
		return;
	kv_batch_free(b->kb);
	free(b);
}

int walrus_batch_commit(walrus *db, walrus_batch *b, int flags)
{
	int rc = api_check_flags(flags, "walrus_batch_commit");
	if (rc == WALRUS_OK && b == NULL)
		rc = wr_error(WALRUS_EINVAL, "walrus_batch_commit: batch is NULL");
	if (rc != WALRUS_OK)
		return rc;
	API_CALL(
	    db, "walrus_batch_commit",
	    WRITABLE("walrus_batch_commit", kv_batch_commit(b->kb, DURABILITY(db, flags), NULL)));
}

/* ---------------------------------------------------------------- iterators */

static int iter_open(walrus_iter *w, wr_relid rel, const void *lo, size_t lolen, const void *hi,
                     size_t hilen)
{
	int rc = kv_iter_open_in(rel, lo, lolen, hi, hilen, &w->it);
	if (rc == WALRUS_OK)
		w->cur = kv_iter_current(w->it);
	return rc;
}

static int iter_open_call(walrus *db, walrus_iter *w, wr_relid rel, const void *lo, size_t lolen,
                          const void *hi, size_t hilen)
{
	API_CALL(db, "walrus_iter_open", IN_SPACE(w->sp, iter_open(w, rel, lo, lolen, hi, hilen)));
}

int walrus_iter_open(walrus *db, const void *lo, size_t lolen, const void *hi, size_t hilen,
                     walrus_iter **it)
{
	return walrus_iter_open_in(db, NULL, lo, lolen, hi, hilen, it);
}

int walrus_iter_open_in(walrus *db, walrus_space *sp, const void *lo, size_t lolen, const void *hi,
                        size_t hilen, walrus_iter **it)
{
	wr_relid rel;
	if (it == NULL)
		return wr_error(WALRUS_EINVAL, "walrus_iter_open: it must not be NULL");
	*it = NULL;
	int rc = api_space_rel(db, sp, "walrus_iter_open", &rel);
	if (rc != WALRUS_OK)
		return rc;
	walrus_iter *w = calloc(1, sizeof(*w));
	if (w == NULL)
		return wr_error(WALRUS_ENOMEM, "out of memory for an iterator");
	w->db = db;
	w->sp = sp;
	*it = w;
	/* On failure the caller still owns *it: walrus_iter_close frees it. */
	rc = iter_open_call(db, w, rel, lo, lolen, hi, hilen);
	if (rc == WALRUS_OK)
		api_iter_own(db, w);
	if (rc != WALRUS_OK && w->it != NULL) {
		/* Left by a PANIC that unwound kv_iter_open: half built. */
		kv_iter_close(w->it);
		w->it = NULL;
	}
	return rc;
}

/* A view iterator's moves: its entry may be its own or its tree iterator's. */
static int view_moved(walrus_iter *it, int rc)
{
	it->cur = kv_viter_current(it->vit);
	return rc;
}

static int iter_ready(const walrus_iter *it, const char *fn)
{
	if (it == NULL || (it->it == NULL && it->vit == NULL))
		return wr_error(WALRUS_EINVAL, "%s: not an open iterator", fn);
	if (it->dead)
		return wr_error(WALRUS_EMISUSE,
		                "%s: the handle, snapshot or transaction this iterator reads "
		                "through has ended",
		                fn);
	return WALRUS_OK;
}

int walrus_iter_seek(walrus_iter *it, const void *key, size_t klen)
{
	int rc = iter_ready(it, "walrus_iter_seek");
	if (rc != WALRUS_OK)
		return rc;
	API_CALL(it->db, "walrus_iter_seek",
	         IN_SPACE(it->sp, it->vit ? view_moved(it, kv_viter_seek(it->vit, key, klen))
	                                  : kv_iter_seek(it->it, key, klen)));
}

int walrus_iter_seek_last(walrus_iter *it)
{
	int rc = iter_ready(it, "walrus_iter_seek_last");
	if (rc != WALRUS_OK)
		return rc;
	API_CALL(it->db, "walrus_iter_seek_last",
	         IN_SPACE(it->sp, it->vit ? view_moved(it, kv_viter_seek_last(it->vit))
	                                  : kv_iter_seek_last(it->it)));
}

/*
 * Most steps of a scan stay in the iterator's private copy of a leaf
 * (kv_iter_next_local): no shared memory, no lock, nothing that can PANIC.
 * They skip the handle check and the PANIC boundary, which cost more than
 * the step itself; every step that needs the pool (the next leaf, an
 * overflow value) still makes both, so a crashed instance is reported at
 * the latest when the copy runs out.
 */
int walrus_iter_next(walrus_iter *it)
{
	int rc = iter_ready(it, "walrus_iter_next");
	if (rc != WALRUS_OK)
		return rc;
	if (it->vit != NULL) {
		if (kv_viter_next_local(it->vit)) {
			it->cur = kv_viter_current(it->vit);
			return WALRUS_OK;
		}
		API_CALL(it->db, "walrus_iter_next",
		         IN_SPACE(it->sp, view_moved(it, kv_viter_next(it->vit))));
	}
	if (kv_iter_next_local(it->it))
		return WALRUS_OK;
	API_CALL(it->db, "walrus_iter_next", IN_SPACE(it->sp, kv_iter_next(it->it)));
}

int walrus_iter_prev(walrus_iter *it)
{
	int rc = iter_ready(it, "walrus_iter_prev");
	if (rc != WALRUS_OK)
		return rc;
	API_CALL(it->db, "walrus_iter_prev",
	         IN_SPACE(it->sp,
	                  it->vit ? view_moved(it, kv_viter_prev(it->vit)) : kv_iter_prev(it->it)));
}

/*
 * These three read the iterator's private record of its entry (kv_iter_cur),
 * which only the iterator's own moves change: no shared memory, so no
 * boundary, and no call into kv per key of a scan.
 */
int walrus_iter_valid(const walrus_iter *it)
{
	return it != NULL && !it->dead && it->cur != NULL && it->cur->valid;
}

void walrus_iter_key(const walrus_iter *it, const void **key, size_t *klen)
{
	bool on = walrus_iter_valid(it);
	*key = on ? it->cur->key : NULL;
	*klen = on ? it->cur->klen : 0;
}

void walrus_iter_value(const walrus_iter *it, const void **val, size_t *vlen)
{
	bool on = walrus_iter_valid(it);
	*val = on ? it->cur->val : NULL;
	*vlen = on ? it->cur->vlen : 0;
}

void walrus_iter_close(walrus_iter *it)
{
	if (it == NULL)
		return;
	if (it->it != NULL)
		kv_iter_close(it->it);
	if (it->vit != NULL)
		kv_viter_close(it->vit);
	api_iter_unlink(it);
	free(it);
}

/* ---------------------------------------------------------------- admin */

/*
 * What WALRUS_SYNC promises for the writes before it, synchronous standby
 * included: a barrier that only flushed the local WAL acknowledged writes
 * a failover could lose.  A standby in recovery inserts nothing: its WAL
 * is its primary's, so only the local flush applies.
 */
static int sync_all(void)
{
	wr_lsn end = wal_insert_lsn();
	if (wal_in_recovery()) {
		wal_flush_to(end);
		return WALRUS_OK;
	}
	return wal_commit_durable(end);
}

int walrus_sync(walrus *db)
{
	API_CALL(db, "walrus_sync", sync_all());
}

int walrus_checkpoint(walrus *db)
{
	API_CALL(db, "walrus_checkpoint",
	         NOT_FULL("walrus_checkpoint", ckpt_request(CKPT_IMMEDIATE | CKPT_FORCE, true)));
}

/*
 * Compaction: the tree's batches (kv_compact), then a checkpoint, which
 * writes the pages the batches freed at the end of the file: only then is
 * the tail punched out, or a later write-back of those pages would take
 * the space again.
 */
static void compact_add(kv_compact_result *sum, const kv_compact_result *r)
{
	sum->leaves_merged += r->leaves_merged;
	sum->leaves_poured += r->leaves_poured;
	sum->pages_moved += r->pages_moved;
	sum->blocks_before += r->blocks_before;
	sum->blocks_after += r->blocks_after;
}

static int compact_one(uint32_t rel, void *arg)
{
	return kv_compact_in(rel, arg);
}

/* Each key space's tree too, in name order; one dropped meanwhile is skipped. */
static int compact_spaces(kv_space_ent *sp, size_t n, kv_compact_result *sum)
{
	int rc = WALRUS_OK;
	for (size_t i = 0; rc == WALRUS_OK && i < n; i++) {
		kv_compact_result r;
		rc = engine_in_space(sp[i].rel, compact_one, &r);
		if (rc == ENGINE_SPACE_GONE)
			sp[i].rel = 0; /* nothing to give back */
		else if (rc == WALRUS_OK)
			compact_add(sum, &r);
		rc = rc == ENGINE_SPACE_GONE ? WALRUS_OK : rc;
	}
	return rc;
}

static int give_back_one(uint32_t rel, void *arg)
{
	uint64_t b = 0;
	int rc = kv_compact_give_back_in(rel, &b);
	*(uint64_t *)arg += b;
	return rc;
}

static int give_back_spaces(const kv_space_ent *sp, size_t n, uint64_t *back)
{
	int rc = WALRUS_OK;
	for (size_t i = 0; rc == WALRUS_OK && i < n; i++)
		if (sp[i].rel != 0 &&
		    (rc = engine_in_space(sp[i].rel, give_back_one, back)) == ENGINE_SPACE_GONE)
			rc = WALRUS_OK;
	return rc;
}

/*
 * Compaction: every tree's batches (kv_compact), then a checkpoint, which
 * writes the pages the batches freed at the ends of the files: only then
 * are the tails punched out, or a later write-back of those pages would
 * take the space again.
 */
static int compact_all(walrus_compact_stats *out)
{
	kv_compact_result r;
	kv_space_ent *sp = NULL;
	size_t n = 0;
	uint64_t back = 0, t0 = wr_now_ns();
	int rc = kv_compact(&r);
	if (rc == WALRUS_OK)
		rc = kv_space_all(&sp, &n);
	if (rc == WALRUS_OK)
		rc = compact_spaces(sp, n, &r);
	if (rc == WALRUS_OK)
		rc = ckpt_request(CKPT_IMMEDIATE | CKPT_FORCE, true);
	if (rc == WALRUS_OK)
		rc = kv_compact_give_back(&back);
	if (rc == WALRUS_OK)
		rc = give_back_spaces(sp, n, &back);
	free(sp);
	if (rc != WALRUS_OK)
		return rc;
	wr_log(WR_LOG,
	       "compaction: %llu leaves merged, %llu poured, %llu pages moved; the trees' ends "
	       "from %u blocks to %u (%zu key spaces besides the default one); %llu blocks "
	       "(%.1f MiB) given back; %.3f s",
	       (unsigned long long)r.leaves_merged, (unsigned long long)r.leaves_poured,
	       (unsigned long long)r.pages_moved, r.blocks_before, r.blocks_after, n,
	       (unsigned long long)back, (double)back * WR_PAGE_SIZE / 1048576.0,
	       (double)(wr_now_ns() - t0) / 1e9);
	if (out != NULL)
		*out = (walrus_compact_stats){.leaves_merged = r.leaves_merged,
		                              .leaves_poured = r.leaves_poured,
		                              .pages_moved = r.pages_moved,
		                              .blocks_before = r.blocks_before,
		                              .blocks_after = r.blocks_after,
		                              .blocks_given_back = back};
	return WALRUS_OK;
}

int walrus_compact(walrus *db, walrus_compact_stats *stats)
{
	API_CALL(db, "walrus_compact", WRITABLE("walrus_compact", compact_all(stats)));
}

static int switch_wal(uint64_t *lsn)
{
	wr_lsn end = wal_insert_switch();
	if (lsn != NULL)
		*lsn = end;
	return WALRUS_OK;
}

int walrus_switch_wal(walrus *db, uint64_t *lsn)
{
	API_CALL(db, "walrus_switch_wal", WRITABLE("walrus_switch_wal", switch_wal(lsn)));
}

static int check_point_name(const char *name)
{
	size_t n = name == NULL ? 0 : strlen(name);
	if (n == 0 || n >= WAL_RESTORE_POINT_NAME)
		return wr_error(WALRUS_EINVAL,
		                "walrus_restore_point: the name must have 1 to %d characters",
		                WAL_RESTORE_POINT_NAME - 1);
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)name[i] < 0x20 || name[i] == 0x7f)
			return wr_error(WALRUS_EINVAL,
			                "walrus_restore_point: the name must not hold control "
			                "characters");
	return WALRUS_OK;
}

static int restore_point(const char *name, uint64_t *lsn)
{
	wal_restore_point_rec rp = {{0}};
	memcpy(rp.name, name, strlen(name));
	wal_begin();
	wal_register_data(&rp, sizeof(rp));
	wr_lsn end = wal_insert(RM_XLOG, XLOG_RESTORE_POINT);
	wal_flush_to(end);
	wr_log(WR_LOG, "restore point \"%s\" created at " WAL_LSN_FMT, name, WAL_LSN_ARGS(end));
	if (lsn != NULL)
		*lsn = end;
	return WALRUS_OK;
}

static int slot_create(const char *name)
{
	engine_shared *e = engine_sh();
	return wal_slot_create(e->datadir, name, (int)e->opts.max_replication_slots);
}

int walrus_slot_create(walrus *db, const char *name)
{
	API_CALL(db, "walrus_slot_create", WRITABLE("walrus_slot_create", slot_create(name)));
}

int walrus_slot_drop(walrus *db, const char *name)
{
	API_CALL(db, "walrus_slot_drop",
	         WRITABLE("walrus_slot_drop", wal_slot_drop(engine_sh()->datadir, name)));
}

int walrus_restore_point(walrus *db, const char *name, uint64_t *lsn)
{
	int rc = check_point_name(name);
	if (rc != WALRUS_OK)
		return rc;
	API_CALL(db, "walrus_restore_point",
	         WRITABLE("walrus_restore_point", restore_point(name, lsn)));
}

int walrus_stats(walrus *db, char **json)
{
	if (json == NULL)
		return wr_error(WALRUS_EINVAL, "walrus_stats: json must not be NULL");
	*json = NULL;
	API_CALL(db, "walrus_stats", engine_stats_json(json));
}

typedef struct verify_ctx {
	walrus_report_fn fn;
	void *arg;
	const char *space; /* the key space being checked, NULL: the default one */
} verify_ctx;

static void verify_report(void *arg, wr_blkno blk, const char *msg)
{
	verify_ctx *v = arg;
	if (v->fn == NULL)
		return;
	if (v->space == NULL) {
		v->fn(v->arg, blk, msg);
		return;
	}
	char m[640];
	snprintf(m, sizeof(m), "key space \"%s\": %s", v->space, msg);
	v->fn(v->arg, blk, m);
}

static int verify_one(uint32_t rel, void *arg)
{
	return kv_verify_in(rel, verify_report, arg, NULL);
}

/* One key space's tree; a space dropped meanwhile is skipped. */
static int verify_space(verify_ctx *v, const kv_space_ent *e)
{
	v->space = e->name;
	int rc = engine_in_space(e->rel, verify_one, v);
	v->space = NULL;
	return rc == ENGINE_SPACE_GONE ? WALRUS_OK : rc;
}

/* The default tree, the catalog's and every key space's: the first damage
 * found decides the code, and every tree is checked. */
static int verify_all(verify_ctx *v)
{
	int rc = kv_verify(verify_report, v, NULL);
	kv_space_ent *sp = NULL;
	size_t n = 0;
	int lrc = kv_space_all(&sp, &n);
	if (lrc == WALRUS_OK && n > 0) {
		v->space = "(catalog)";
		lrc = kv_verify_in(KV_CATALOG_REL, verify_report, v, NULL);
		v->space = NULL;
	}
	for (size_t i = 0; lrc == WALRUS_OK && i < n; i++)
		lrc = verify_space(v, &sp[i]);
	free(sp);
	if (rc == WALRUS_OK ||
	    (rc == WALRUS_ECORRUPT && lrc != WALRUS_OK && lrc != WALRUS_ECORRUPT))
		rc = lrc;
	return rc;
}

int walrus_verify(walrus *db, walrus_report_fn report, void *arg)
{
	/* Set before the setjmp and never changed after it, so its value is
	 * determinate after a longjmp (C11 7.13.2.1), and this frame outlives
	 * kv_verify, the only user of its address. */
	verify_ctx v = {report, arg, NULL};
	API_CALL(db, "walrus_verify", verify_all(&v));
}
