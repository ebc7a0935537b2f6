/*
 * api_int.h - what the public calls' files share (api_kv.c, api_txn.c):
 * the call bracket, durability flags, and the iterator, which reads the
 * tree, a snapshot or a transaction.
 */
#ifndef WALRUS_API_INT_H
#define WALRUS_API_INT_H

#include "engine/engine.h"

#include <stdatomic.h>

#include "kv/kv.h"

/*
 * An iterator: of the tree (it), or of a snapshot or a transaction (vit,
 * with @owner naming which: a snapshot released or a transaction ended
 * makes it dead, and its calls fail with WALRUS_EMISUSE).
 */
struct walrus_iter {
	walrus *db;
	walrus_space *sp; /* the key space it reads, NULL: the default one */
	kv_iter *it;
	kv_viter *vit;
	const kv_iter_cur *cur; /* the entry it is on, read without a call per key */
	void *owner;            /* walrus_snapshot or walrus_txn, NULL for the tree */
	bool dead;
	walrus_iter *next_owned, **prev_owned; /* on its owner's list */
};

/*
 * Runs @body inside the handle's call (claimed for this thread, its backend
 * current) and a fresh PANIC boundary.  A macro because setjmp must be
 * called in the frame that stays alive.
 */
#define API_CALL(db, fn, body)                                                                     \
	do {                                                                                       \
		wr_error_clear();                                                                  \
		walrus *db_ = (db);                                                                \
		int rc_ = api_call_begin(db_, (fn));                                               \
		if (rc_ != WALRUS_OK)                                                              \
			return rc_;                                                                \
		jmp_buf jb_;                                                                       \
		if (setjmp(jb_)) {                                                                 \
			client_leave();                                                            \
			rc_ = client_panicked();                                                   \
			api_call_end(db_);                                                         \
			return rc_;                                                                \
		}                                                                                  \
		client_enter(&jb_);                                                                \
		rc_ = (body);                                                                      \
		client_leave();                                                                    \
		api_call_end(db_);                                                                 \
		return rc_;                                                                        \
	} while (0)

/*
 * An expression, not a variable: nothing local lives across the setjmp.
 * No flag: the handle's synchronous_commit decides (on by default).
 */
#define DURABILITY(db, flags)                                                                      \
	((flags)&WALRUS_SYNC    ? KV_SYNC                                                          \
	 : (flags)&WALRUS_ASYNC ? KV_ASYNC                                                         \
	 : api_sync_default(db) ? KV_SYNC                                                          \
	                        : KV_ASYNC)

/* A read-only instance (a full disk, reserve.c) writes no WAL: nothing is acknowledged. */
#define NOT_FULL(fn, call) (atomic_load(&engine_sh()->read_only) ? reserve_refuse(fn) : (call))
/* A standby in recovery takes reads only: its WAL is its primary's. */
#define WRITABLE(fn, call)                                                                         \
	(atomic_load(&engine_sh()->sb.active) ? standby_refuse(fn) : NOT_FULL(fn, call))

int api_check_flags(int flags, const char *fn);

/* Snapshots and transactions of a handle: walrus_close makes them orphans
 * (their calls fail with WALRUS_EMISUSE; they must still be freed). */
void api_txn_orphan_all(walrus *db, bool attached);
/* The heads of the handle's lists (api.c keeps them in the handle). */
typedef struct api_owned {
	struct walrus_space *spaces; /* opened by name, freed with the handle */
	struct walrus_snapshot *snaps;
	struct walrus_txn *txns;
	walrus_iter *iters; /* the iterators over the tree itself */
} api_owned;
api_owned *api_handle_owned(walrus *db);
/* Unlinks an iterator from its owner's list (walrus_iter_close). */
void api_iter_unlink(walrus_iter *it);
/* An iterator over the tree joins its handle's list: walrus_close ends it. */
void api_iter_own(walrus *db, walrus_iter *it);

/*
 * Key spaces (api_space.c).  api_space_rel: @sp's relation (NULL: KV_REL),
 * EMISUSE for another handle's space.  Inside a call, a read or write of a
 * space is wrapped as IN_SPACE(sp, call): the backend's slot says which
 * space it is in (a drop waits for it to leave) and a space dropped since
 * it was opened fails with ENOTFOUND naming it.
 */
int api_space_rel(walrus *db, const walrus_space *sp, const char *fn, wr_relid *rel);
int api_space_enter(walrus_space *sp);
int api_space_failed(void);
int api_space_leave(int rc);
#define IN_SPACE(sp, call)                                                                         \
	((sp) == NULL                                                                              \
	     ? (call)                                                                              \
	     : api_space_leave(api_space_enter(sp) != WALRUS_OK ? api_space_failed() : (call)))
/* A batch has no handle: only @sp's own is checked (NULL: KV_REL); a space
 * dropped before the commit fails it (kv checks, under the tree lock). */
int api_space_batch_rel(const walrus_space *sp, const char *fn, wr_relid *rel);
void api_space_free_all(walrus *db);

#endif /* WALRUS_API_INT_H */
