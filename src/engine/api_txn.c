/*
 * api_txn.c - snapshots and transactions of include/walrus.h.
 *
 * A snapshot is a kv_snap (kv_mvcc.c) registered in shared memory, owned by
 * its handle.  A transaction is a snapshot, its buffered writes (sorted by
 * key: reads and iterators see them over the snapshot), and what it read:
 * keys (found or not) and iterated ranges.  Its commit is optimistic
 * (backward validation): under the tree lock, the versions noted since its
 * snapshot are the keys every later commit changed; one that the
 * transaction wrote, or (serializable) read or iterated over, is a
 * conflict and nothing is applied.  Otherwise its writes are applied as one
 * batch in the same hold of the lock, so the transaction takes effect at
 * its commit point with exactly the reads it made: every committed
 * transaction is equivalent to running alone there, in commit order.
 *
 * Ownership: the handle keeps lists of its snapshots and transactions and
 * each of those the iterators that read through it; walrus_close orphans
 * them (released in shared memory, their calls EMISUSE), and the end of a
 * snapshot or transaction kills its iterators.  All of this is the
 * process's memory, under the handle's one-thread-at-a-time rule.
 */
#include "engine/api_int.h"
#include "wal/wal.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SNAP_MAGIC 0x534e4150u /* "SNAP" */
#define TXN_MAGIC  0x54584e31u /* "TXN1" */

struct walrus_snapshot {
	uint32_t magic;
	walrus *db; /* NULL once its handle closed */
	kv_snap snap;
	walrus_iter *iters;
	walrus_snapshot *next, **prev;
};

typedef struct keyvec {
	kv_overlay_ent *e; /* k, kl only for reads */
	size_t n, cap;
} keyvec;

typedef struct range {
	wr_relid rel;
	char *lo, *hi;
	uint16_t lol, hil;
} range;

struct walrus_txn {
	uint32_t magic;
	walrus *db; /* NULL once its handle closed */
	int flags;
	bool open;
	kv_snap snap;
	keyvec writes; /* sorted: k, v, deleted */
	keyvec reads;  /* sorted keys (serializable only), v: a kv_leaf_hint or empty */
	range *ranges;
	size_t nranges, rcap;
	walrus_iter *iters;
	/* The commit's batch: held here, not on the stack, so that a PANIC
	 * that unwinds the commit (longjmp to the call's boundary) leaves it
	 * to walrus_txn_free instead of leaking it. */
	kv_batch *batch;
	walrus_txn *next, **prev;
};

/* ---------------------------------------------------------------- sorted keys */

/* Entries are ordered by tree (key space), then key. */
static int ent_order(const kv_overlay_ent *e, wr_relid rel, const void *k, size_t kl)
{
	if (e->rel != rel)
		return e->rel < rel ? -1 : 1;
	return kv_key_order(e->k, e->kl, k, (uint16_t)kl);
}

static size_t kv_lower(const keyvec *v, wr_relid rel, const void *k, size_t kl)
{
	size_t a = 0, b = v->n;
	while (a < b) {
		size_t m = (a + b) / 2;
		if (ent_order(&v->e[m], rel, k, kl) < 0)
			a = m + 1;
		else
			b = m;
	}
	return a;
}

static const kv_overlay_ent *kv_find(const keyvec *v, wr_relid rel, const void *k, size_t kl)
{
	size_t i = kv_lower(v, rel, k, kl);
	return i < v->n && ent_order(&v->e[i], rel, k, kl) == 0 ? &v->e[i] : NULL;
}

/* The entries of tree @rel: [*from, *from + return). */
static size_t tree_part(const keyvec *v, wr_relid rel, size_t *from)
{
	size_t i = kv_lower(v, rel, "", 0), j = i;
	while (j < v->n && v->e[j].rel == rel)
		j++;
	*from = i;
	return j - i;
}

/* Sets @k's entry (a copy of k and v), replacing one there. */
static int kv_set(keyvec *v, wr_relid rel, const void *k, size_t kl, const void *val, size_t vl,
                  bool deleted)
{
	size_t i = kv_lower(v, rel, k, kl);
	bool there = i < v->n && ent_order(&v->e[i], rel, k, kl) == 0;
	char *mem = malloc(kl + vl + 1);
	if (mem == NULL)
		return wr_error(WALRUS_ENOMEM, "out of memory for a transaction's write");
	memcpy(mem, k, kl);
	if (vl > 0)
		memcpy(mem + kl, val, vl);
	kv_overlay_ent e = {.rel = rel,
	                    .k = mem,
	                    .v = mem + kl,
	                    .kl = (uint16_t)kl,
	                    .vl = (uint32_t)vl,
	                    .deleted = deleted};
	if (there) {
		free((char *)v->e[i].k);
		v->e[i] = e;
		return WALRUS_OK;
	}
	if (wr_grow(&v->e, &v->cap, v->n + 1, sizeof(*v->e), 16) != WALRUS_OK) {
		free(mem);
		return wr_error(WALRUS_ENOMEM, "out of memory for a transaction");
	}
	memmove(&v->e[i + 1], &v->e[i], (v->n - i) * sizeof(*v->e));
	v->e[i] = e;
	v->n++;
	return WALRUS_OK;
}

static void keyvec_free(keyvec *v)
{
	for (size_t i = 0; i < v->n; i++)
		free((char *)v->e[i].k);
	free(v->e);
	memset(v, 0, sizeof(*v));
}

/* ---------------------------------------------------------------- ownership */

static void kill_iters(walrus_iter **head)
{
	for (walrus_iter *it = *head; it != NULL;) {
		walrus_iter *next = it->next_owned;
		it->dead = true;
		it->owner = NULL;
		it->next_owned = NULL;
		it->prev_owned = NULL;
		it = next;
	}
	*head = NULL;
}

static void own_iter(walrus_iter **head, walrus_iter *it, void *owner)
{
	it->owner = owner;
	it->next_owned = *head;
	it->prev_owned = head;
	if (*head != NULL)
		(*head)->prev_owned = &it->next_owned;
	*head = it;
}

void api_iter_own(walrus *db, walrus_iter *it)
{
	own_iter(&api_handle_owned(db)->iters, it, db);
}

void api_iter_unlink(walrus_iter *it)
{
	if (it->prev_owned == NULL)
		return;
	*it->prev_owned = it->next_owned;
	if (it->next_owned != NULL)
		it->next_owned->prev_owned = it->prev_owned;
	it->prev_owned = NULL;
	it->next_owned = NULL;
}

#define LIST_ADD(head, x)                                                                          \
	do {                                                                                       \
		(x)->next = *(head);                                                               \
		(x)->prev = (head);                                                                \
		if (*(head) != NULL)                                                               \
			(*(head))->prev = &(x)->next;                                              \
		*(head) = (x);                                                                     \
	} while (0)

#define LIST_DEL(x)                                                                                \
	do {                                                                                       \
		if ((x)->prev != NULL) {                                                           \
			*(x)->prev = (x)->next;                                                    \
			if ((x)->next != NULL)                                                     \
				(x)->next->prev = (x)->prev;                                       \
		}                                                                                  \
		(x)->prev = NULL;                                                                  \
		(x)->next = NULL;                                                                  \
	} while (0)

void api_txn_orphan_all(walrus *db, bool attached)
{
	api_owned *o = api_handle_owned(db);
	kill_iters(&o->iters);
	while (o->snaps != NULL) {
		walrus_snapshot *s = o->snaps;
		if (attached)
			kv_snap_release(&s->snap);
		kill_iters(&s->iters);
		s->db = NULL;
		LIST_DEL(s);
	}
	while (o->txns != NULL) {
		walrus_txn *t = o->txns;
		if (attached)
			kv_snap_release(&t->snap);
		kill_iters(&t->iters);
		t->db = NULL;
		t->open = false;
		LIST_DEL(t);
	}
}

/* One call on @db with @body(@arg) inside its bracket. */
static int in_call(walrus *db, const char *fn, int (*body)(void *), void *arg)
{
	API_CALL(db, fn, body(arg));
}

/* ---------------------------------------------------------------- snapshots */

/* A transaction that wrote commits on the primary only. */
static int not_on_standby(const char *fn)
{
	if (atomic_load(&engine_sh()->sb.active))
		return standby_refuse(fn);
	return WALRUS_OK;
}

typedef struct take_args {
	kv_snap *s;
	const char *fn;
} take_args;

static int take_body(void *arg)
{
	take_args *a = arg;
	(void)a->fn;
	return kv_snap_take(a->s); /* a standby's too: its redo notes versions */
}

int walrus_snapshot_take(walrus *db, walrus_snapshot **snap)
{
	if (snap == NULL)
		return wr_error(WALRUS_EINVAL, "walrus_snapshot_take: snap must not be NULL");
	*snap = NULL;
	int rc = api_handle_valid(db, "walrus_snapshot_take");
	if (rc != WALRUS_OK)
		return rc;
	walrus_snapshot *s = calloc(1, sizeof(*s));
	if (s == NULL)
		return wr_error(WALRUS_ENOMEM, "out of memory for a snapshot");
	take_args a = {&s->snap, "walrus_snapshot_take"};
	rc = in_call(db, "walrus_snapshot_take", take_body, &a);
	if (rc != WALRUS_OK) {
		free(s);
		return rc;
	}
	s->magic = SNAP_MAGIC;
	s->db = db;
	LIST_ADD(&api_handle_owned(db)->snaps, s);
	*snap = s;
	return WALRUS_OK;
}

static int release_body(void *arg)
{
	kv_snap_release(arg);
	return WALRUS_OK;
}

void walrus_snapshot_release(walrus_snapshot *snap)
{
	if (snap == NULL || snap->magic != SNAP_MAGIC)
		return;
	kill_iters(&snap->iters);
	if (snap->db != NULL)
		(void)in_call(snap->db, "walrus_snapshot_release", release_body, &snap->snap);
	LIST_DEL(snap);
	snap->magic = 0;
	free(snap);
}

/* The snapshot may be read through @db. */
static int snap_usable(walrus *db, const walrus_snapshot *s, const char *fn)
{
	if (s == NULL || s->magic != SNAP_MAGIC)
		return wr_error(WALRUS_EINVAL, "%s: not a snapshot", fn);
	if (s->db == NULL)
		return wr_error(WALRUS_EMISUSE, "%s: the snapshot's handle was closed", fn);
	if (s->db != db)
		return wr_error(WALRUS_EMISUSE,
		                "%s: the snapshot belongs to another handle: read through the "
		                "handle that took it",
		                fn);
	return WALRUS_OK;
}

int walrus_get_at(walrus *db, const walrus_snapshot *snap, const void *key, size_t klen, void **val,
                  size_t *vlen)
{
	return walrus_get_at_in(db, snap, NULL, key, klen, val, vlen);
}

int walrus_get_at_in(walrus *db, const walrus_snapshot *snap, walrus_space *sp, const void *key,
                     size_t klen, void **val, size_t *vlen)
{
	wr_relid rel;
	if (val == NULL || vlen == NULL)
		return wr_error(WALRUS_EINVAL, "walrus_get_at: val and vlen must not be NULL");
	*val = NULL;
	*vlen = 0;
	int rc = snap_usable(db, snap, "walrus_get_at");
	if (rc == WALRUS_OK)
		rc = api_space_rel(db, sp, "walrus_get_at", &rel);
	if (rc != WALRUS_OK)
		return rc;
	API_CALL(db, "walrus_get_at",
	         IN_SPACE(sp, kv_snap_get(&snap->snap, rel, key, klen, val, vlen)));
}

int walrus_get_into_at(walrus *db, const walrus_snapshot *snap, const void *key, size_t klen,
                       void *buf, size_t cap, size_t *vlen)
{
	return walrus_get_into_at_in(db, snap, NULL, key, klen, buf, cap, vlen);
}

int walrus_get_into_at_in(walrus *db, const walrus_snapshot *snap, walrus_space *sp,
                          const void *key, size_t klen, void *buf, size_t cap, size_t *vlen)
{
	wr_relid rel;
	if (vlen == NULL || (buf == NULL && cap > 0))
		return wr_error(WALRUS_EINVAL, "walrus_get_into_at: vlen must not be NULL");
	int rc = snap_usable(db, snap, "walrus_get_into_at");
	if (rc == WALRUS_OK)
		rc = api_space_rel(db, sp, "walrus_get_into_at", &rel);
	if (rc != WALRUS_OK)
		return rc;
	API_CALL(db, "walrus_get_into_at",
	         IN_SPACE(sp, kv_snap_get_into(&snap->snap, rel, key, klen, buf, cap, vlen)));
}

typedef struct view_args {
	walrus_iter *w;
	walrus_space *sp;
	wr_relid rel;
	const kv_snap *s;
	const kv_overlay_ent *ov;
	size_t nov;
	const void *lo, *hi;
	size_t lolen, hilen;
} view_args;

static int view_body(void *arg)
{
	view_args *a = arg;
	int rc = kv_viter_open(a->s, a->rel, a->ov, a->nov, a->lo, a->lolen, a->hi, a->hilen,
	                       &a->w->vit);
	if (rc == WALRUS_OK)
		a->w->cur = kv_viter_current(a->w->vit);
	return rc;
}

static int view_body_in(void *arg)
{
	view_args *a = arg;
	return IN_SPACE(a->sp, view_body(a));
}

/* A view iterator owned by @head's owner; on failure *it stays NULL. */
static int view_open(walrus *db, const char *fn, view_args *a, walrus_iter **head, void *owner,
                     walrus_iter **it)
{
	walrus_iter *w = calloc(1, sizeof(*w));
	if (w == NULL)
		return wr_error(WALRUS_ENOMEM, "out of memory for an iterator");
	w->db = db;
	w->sp = a->sp;
	a->w = w;
	int rc = in_call(db, fn, view_body_in, a);
	if (rc != WALRUS_OK) {
		kv_viter_close(w->vit);
		free(w);
		return rc;
	}
	own_iter(head, w, owner);
	*it = w;
	return WALRUS_OK;
}

int walrus_iter_open_at(walrus *db, const walrus_snapshot *snap, const void *lo, size_t lolen,
                        const void *hi, size_t hilen, walrus_iter **it)
{
	return walrus_iter_open_at_in(db, snap, NULL, lo, lolen, hi, hilen, it);
}

int walrus_iter_open_at_in(walrus *db, const walrus_snapshot *snap, walrus_space *sp,
                           const void *lo, size_t lolen, const void *hi, size_t hilen,
                           walrus_iter **it)
{
	wr_relid rel;
	if (it == NULL)
		return wr_error(WALRUS_EINVAL, "walrus_iter_open_at: it must not be NULL");
	*it = NULL;
	int rc = snap_usable(db, snap, "walrus_iter_open_at");
	if (rc == WALRUS_OK)
		rc = api_space_rel(db, sp, "walrus_iter_open_at", &rel);
	if (rc != WALRUS_OK)
		return rc;
	walrus_snapshot *s = (walrus_snapshot *)snap; /* its iterator list is ours to change */
	view_args a = {.sp = sp,
	               .rel = rel,
	               .s = &s->snap,
	               .lo = lo,
	               .lolen = lolen,
	               .hi = hi,
	               .hilen = hilen};
	return view_open(db, "walrus_iter_open_at", &a, &s->iters, s, it);
}

/* ---------------------------------------------------------------- transactions */

int walrus_txn_begin(walrus *db, int flags, walrus_txn **txn)
{
	if (txn == NULL)
		return wr_error(WALRUS_EINVAL, "walrus_txn_begin: txn must not be NULL");
	*txn = NULL;
	if (flags & ~WALRUS_TXN_SNAPSHOT)
		return wr_error(WALRUS_EINVAL, "walrus_txn_begin: unknown flags 0x%x",
		                (unsigned)flags);
	int rc = api_handle_valid(db, "walrus_txn_begin");
	if (rc != WALRUS_OK)
		return rc;
	walrus_txn *t = calloc(1, sizeof(*t));
	if (t == NULL)
		return wr_error(WALRUS_ENOMEM, "out of memory for a transaction");
	take_args a = {&t->snap, "walrus_txn_begin"};
	rc = in_call(db, "walrus_txn_begin", take_body, &a);
	if (rc != WALRUS_OK) {
		free(t);
		return rc;
	}
	t->magic = TXN_MAGIC;
	t->db = db;
	t->flags = flags;
	t->open = true;
	LIST_ADD(&api_handle_owned(db)->txns, t);
	*txn = t;
	return WALRUS_OK;
}

static bool serializable(const walrus_txn *t)
{
	return !(t->flags & WALRUS_TXN_SNAPSHOT);
}

static int txn_usable(const walrus_txn *t, const char *fn)
{
	if (t == NULL || t->magic != TXN_MAGIC)
		return wr_error(WALRUS_EINVAL, "%s: not a transaction", fn);
	if (t->db == NULL)
		return wr_error(WALRUS_EMISUSE, "%s: the transaction's handle was closed", fn);
	if (!t->open)
		return wr_error(
		    WALRUS_EMISUSE,
		    "%s: the transaction has ended (committed or aborted): begin another", fn);
	return WALRUS_OK;
}

/* A key read (serializable): a later change to it is a conflict.  Where
 * the read found it in the tree (@h) goes with it, for the commit's put. */
static int note_read(walrus_txn *t, wr_relid rel, const void *k, size_t kl, const kv_leaf_hint *h)
{
	if (!serializable(t) || kv_find(&t->reads, rel, k, kl) != NULL)
		return WALRUS_OK;
	bool hinted = h->blk != 0;
	return kv_set(&t->reads, rel, k, kl, hinted ? h : NULL, hinted ? sizeof(*h) : 0, false);
}

typedef struct get_args {
	walrus_txn *t;
	walrus_space *sp;
	wr_relid rel;
	const void *k;
	size_t kl;
	void **v;
	void *buf;
	size_t cap;
	size_t *vl;
} get_args;

static int own_write(const kv_overlay_ent *w, get_args *a)
{
	if (w->deleted)
		return wr_error(WALRUS_ENOTFOUND, "key not found");
	*a->vl = w->vl;
	if (a->v != NULL) {
		*a->v = malloc(w->vl > 0 ? w->vl : 1);
		if (*a->v == NULL)
			return wr_error(WALRUS_ENOMEM, "out of memory for a value of %u bytes",
			                w->vl);
		memcpy(*a->v, w->v, w->vl);
		return WALRUS_OK;
	}
	if (w->vl > a->cap)
		return wr_error(WALRUS_ETOOBIG,
		                "buffer too small: the value is %u bytes, the buffer %zu", w->vl,
		                a->cap);
	memcpy(a->buf, w->v, w->vl);
	return WALRUS_OK;
}

static int get_read(get_args *a)
{
	walrus_txn *t = a->t;
	int rc = kv_check_key(a->kl);
	if (rc != WALRUS_OK)
		return rc;
	const kv_overlay_ent *w = kv_find(&t->writes, a->rel, a->k, a->kl);
	if (w != NULL)
		return own_write(w, a);
	kv_leaf_hint h;
	rc = kv_snap_get_hinted(&t->snap, a->rel, a->k, a->kl, a->v, a->buf, a->cap, a->vl, &h);
	if (rc != WALRUS_OK && rc != WALRUS_ENOTFOUND && rc != WALRUS_ETOOBIG)
		return rc;
	int nrc = note_read(t, a->rel, a->k, a->kl, &h);
	if (nrc != WALRUS_OK && a->v != NULL) {
		free(*a->v);
		*a->v = NULL;
	}
	return nrc != WALRUS_OK ? nrc : rc;
}

static int get_body(void *arg)
{
	get_args *a = arg;
	return IN_SPACE(a->sp, get_read(a));
}

int walrus_txn_get(walrus_txn *txn, const void *key, size_t klen, void **val, size_t *vlen)
{
	return walrus_txn_get_in(txn, NULL, key, klen, val, vlen);
}

int walrus_txn_get_in(walrus_txn *txn, walrus_space *sp, const void *key, size_t klen, void **val,
                      size_t *vlen)
{
	if (val == NULL || vlen == NULL)
		return wr_error(WALRUS_EINVAL, "walrus_txn_get: val and vlen must not be NULL");
	*val = NULL;
	*vlen = 0;
	wr_relid rel;
	int rc = txn_usable(txn, "walrus_txn_get");
	if (rc == WALRUS_OK)
		rc = api_space_rel(txn->db, sp, "walrus_txn_get", &rel);
	if (rc != WALRUS_OK)
		return rc;
	get_args a = {.t = txn, .sp = sp, .rel = rel, .k = key, .kl = klen, .v = val, .vl = vlen};
	return in_call(txn->db, "walrus_txn_get", get_body, &a);
}

int walrus_txn_get_into(walrus_txn *txn, const void *key, size_t klen, void *buf, size_t cap,
                        size_t *vlen)
{
	return walrus_txn_get_into_in(txn, NULL, key, klen, buf, cap, vlen);
}

int walrus_txn_get_into_in(walrus_txn *txn, walrus_space *sp, const void *key, size_t klen,
                           void *buf, size_t cap, size_t *vlen)
{
	if (vlen == NULL || (buf == NULL && cap > 0))
		return wr_error(WALRUS_EINVAL, "walrus_txn_get_into: vlen must not be NULL");
	*vlen = 0;
	wr_relid rel;
	int rc = txn_usable(txn, "walrus_txn_get_into");
	if (rc == WALRUS_OK)
		rc = api_space_rel(txn->db, sp, "walrus_txn_get_into", &rel);
	if (rc != WALRUS_OK)
		return rc;
	get_args a = {.t = txn,
	              .sp = sp,
	              .rel = rel,
	              .k = key,
	              .kl = klen,
	              .buf = buf,
	              .cap = cap,
	              .vl = vlen};
	return in_call(txn->db, "walrus_txn_get_into", get_body, &a);
}

int walrus_txn_put(walrus_txn *txn, const void *key, size_t klen, const void *val, size_t vlen)
{
	return walrus_txn_put_in(txn, NULL, key, klen, val, vlen);
}

int walrus_txn_put_in(walrus_txn *txn, walrus_space *sp, const void *key, size_t klen,
                      const void *val, size_t vlen)
{
	wr_relid rel = KV_REL;
	int rc = txn_usable(txn, "walrus_txn_put");
	if (rc == WALRUS_OK)
		rc = api_space_rel(txn->db, sp, "walrus_txn_put", &rel);
	if (rc == WALRUS_OK)
		rc = kv_check_key(klen);
	if (rc == WALRUS_OK && vlen > KV_MAX_VALUE)
		rc = wr_error(WALRUS_ETOOBIG, "value of %zu bytes is over the limit of %u bytes",
		              vlen, KV_MAX_VALUE);
	if (rc == WALRUS_OK && key == NULL)
		rc = wr_error(WALRUS_EINVAL, "walrus_txn_put: key is NULL");
	if (rc == WALRUS_OK && val == NULL && vlen > 0)
		rc = wr_error(WALRUS_EINVAL, "walrus_txn_put: val is NULL");
	return rc == WALRUS_OK ? kv_set(&txn->writes, rel, key, klen, val, vlen, false) : rc;
}

int walrus_txn_delete(walrus_txn *txn, const void *key, size_t klen)
{
	return walrus_txn_delete_in(txn, NULL, key, klen);
}

int walrus_txn_delete_in(walrus_txn *txn, walrus_space *sp, const void *key, size_t klen)
{
	wr_relid rel = KV_REL;
	int rc = txn_usable(txn, "walrus_txn_delete");
	if (rc == WALRUS_OK)
		rc = api_space_rel(txn->db, sp, "walrus_txn_delete", &rel);
	if (rc == WALRUS_OK)
		rc = kv_check_key(klen);
	if (rc == WALRUS_OK && key == NULL)
		rc = wr_error(WALRUS_EINVAL, "walrus_txn_delete: key is NULL");
	return rc == WALRUS_OK ? kv_set(&txn->writes, rel, key, klen, NULL, 0, true) : rc;
}

/* A range iterated (serializable): a later change inside it is a conflict. */
static int note_range(walrus_txn *t, wr_relid rel, const void *lo, size_t lol, const void *hi,
                      size_t hil)
{
	if (!serializable(t))
		return WALRUS_OK;
	if (wr_grow(&t->ranges, &t->rcap, t->nranges + 1, sizeof(range), 4) != WALRUS_OK)
		return wr_error(WALRUS_ENOMEM, "out of memory for a transaction");
	range r = {.rel = rel};
	if (lo != NULL && lol > 0 && (r.lo = malloc(lol)) == NULL)
		return wr_error(WALRUS_ENOMEM, "out of memory for a transaction");
	if (hi != NULL && hil > 0 && (r.hi = malloc(hil)) == NULL) {
		free(r.lo);
		return wr_error(WALRUS_ENOMEM, "out of memory for a transaction");
	}
	if (r.lo != NULL)
		memcpy(r.lo, lo, lol);
	if (r.hi != NULL)
		memcpy(r.hi, hi, hil);
	r.lol = r.lo != NULL ? (uint16_t)lol : 0;
	r.hil = r.hi != NULL ? (uint16_t)hil : 0;
	t->ranges[t->nranges++] = r;
	return WALRUS_OK;
}

int walrus_txn_iter_open(walrus_txn *txn, const void *lo, size_t lolen, const void *hi,
                         size_t hilen, walrus_iter **it)
{
	return walrus_txn_iter_open_in(txn, NULL, lo, lolen, hi, hilen, it);
}

int walrus_txn_iter_open_in(walrus_txn *txn, walrus_space *sp, const void *lo, size_t lolen,
                            const void *hi, size_t hilen, walrus_iter **it)
{
	wr_relid rel = KV_REL;
	if (it == NULL)
		return wr_error(WALRUS_EINVAL, "walrus_txn_iter_open: it must not be NULL");
	*it = NULL;
	int rc = txn_usable(txn, "walrus_txn_iter_open");
	if (rc == WALRUS_OK)
		rc = api_space_rel(txn->db, sp, "walrus_txn_iter_open", &rel);
	if (rc == WALRUS_OK &&
	    ((lo != NULL && lolen > KV_MAX_KEY) || (hi != NULL && hilen > KV_MAX_KEY)))
		rc =
		    wr_error(WALRUS_ETOOBIG, "a bound of an iterator is over %u bytes", KV_MAX_KEY);
	if (rc == WALRUS_OK)
		rc = note_range(txn, rel, lo, lolen, hi, hilen);
	if (rc != WALRUS_OK)
		return rc;
	size_t from, n = tree_part(&txn->writes, rel, &from);
	view_args a = {.sp = sp,
	               .rel = rel,
	               .s = &txn->snap,
	               .ov = txn->writes.e + from,
	               .nov = n,
	               .lo = lo,
	               .lolen = lolen,
	               .hi = hi,
	               .hilen = hilen};
	return view_open(txn->db, "walrus_txn_iter_open", &a, &txn->iters, txn, it);
}

/* ---------------------------------------------------------------- commit */

static bool in_ranges(const walrus_txn *t, wr_relid rel, const char *k, uint16_t kl)
{
	for (size_t i = 0; i < t->nranges; i++) {
		const range *r = &t->ranges[i];
		if (r->rel == rel && (r->lo == NULL || kv_key_order(k, kl, r->lo, r->lol) >= 0) &&
		    (r->hi == NULL || kv_key_order(k, kl, r->hi, r->hil) < 0))
			return true;
	}
	return false;
}

static int conflict(const char *what, const char *k, uint16_t kl)
{
	char shown[41];
	size_t n = wr_shown(shown, sizeof(shown), k, kl, '.');
	return wr_error(WALRUS_ECONFLICT,
	                "transaction conflict: a commit after this transaction's snapshot changed "
	                "a key it %s (\"%s%s\"); nothing was applied: run it again",
	                what, shown, kl > n ? "..." : "");
}

static int check_one(void *arg, wr_relid rel, const char *k, uint16_t kl, const kv_version *v)
{
	(void)v;
	walrus_txn *t = arg;
	if (kv_find(&t->writes, rel, k, kl) != NULL)
		return conflict("wrote", k, kl);
	if (!serializable(t))
		return WALRUS_OK;
	if (kv_find(&t->reads, rel, k, kl) != NULL)
		return conflict("read", k, kl);
	if (in_ranges(t, rel, k, kl))
		return conflict("iterated over", k, kl);
	return WALRUS_OK;
}

/* Under the tree lock: every change committed since the snapshot. */
static int check_conflicts(void *arg)
{
	walrus_txn *t = arg;
	uint64_t pos = t->snap.from;
	int rc = kv_mv_scan(&t->snap, &pos, check_one, t);
	if (rc == WALRUS_ESNAPSHOT)
		return wr_error(WALRUS_ECONFLICT,
		                "transaction conflict: its snapshot is too old to check (%s); "
		                "nothing was applied: run it again",
		                walrus_errmsg());
	return rc;
}

/* Where the transaction's read of @w's key found it, if it read it, in *@h
 * (copied: the read's entry keeps it unaligned after the key). */
static const kv_leaf_hint *read_hint(const walrus_txn *t, const kv_overlay_ent *w, kv_leaf_hint *h)
{
	const kv_overlay_ent *r = kv_find(&t->reads, w->rel, w->k, w->kl);
	if (r == NULL || r->vl != sizeof(*h))
		return NULL;
	memcpy(h, r->v, sizeof(*h));
	return h;
}

typedef struct commit_args {
	walrus_txn *t;
	int durability;
} commit_args;

static int apply_writes(walrus_txn *t, int durability)
{
	kv_batch *b = t->batch = kv_batch_new();
	if (b == NULL)
		return wr_error(WALRUS_ENOMEM, "out of memory for a transaction's batch");
	int rc = WALRUS_OK;
	for (size_t i = 0; rc == WALRUS_OK && i < t->writes.n; i++) {
		const kv_overlay_ent *w = &t->writes.e[i];
		kv_leaf_hint h;
		rc = w->deleted ? kv_batch_delete_in(b, w->rel, w->k, w->kl)
		                : kv_batch_put_hinted(b, w->rel, w->k, w->kl, w->v, w->vl,
		                                      read_hint(t, w, &h));
	}
	if (rc == WALRUS_OK)
		rc = kv_batch_commit_checked(b, durability, check_conflicts, t, &t->snap, NULL);
	kv_batch_free(b);
	t->batch = NULL;
	return rc;
}

static int commit_body(void *arg)
{
	commit_args *a = arg;
	walrus_txn *t = a->t;
	t->open = false; /* ended, whatever the outcome */
	kill_iters(&t->iters);
	int rc = WALRUS_OK;
	if (t->writes.n > 0) {
		rc = not_on_standby("walrus_txn_commit");
		if (rc == WALRUS_OK && atomic_load(&engine_sh()->read_only))
			rc = reserve_refuse("walrus_txn_commit");
		if (rc == WALRUS_OK)
			rc = apply_writes(t, a->durability);
	} else if (a->durability == KV_SYNC && !atomic_load(&engine_sh()->sb.active)) {
		/* A read-only commit acknowledges what it read: a batch becomes
		 * visible before its WAL is flushed (its writer waits after the
		 * tree lock), so wait as its writer does for the last one seen. */
		rc = wal_commit_durable(t->snap.lsn);
	}
	kv_snap_release(&t->snap);
	return rc;
}

int walrus_txn_commit(walrus_txn *txn, int flags)
{
	int rc = txn_usable(txn, "walrus_txn_commit");
	if (rc == WALRUS_OK)
		rc = api_check_flags(flags, "walrus_txn_commit");
	if (rc != WALRUS_OK)
		return rc;
	commit_args a = {.t = txn, .durability = DURABILITY(txn->db, flags)};
	rc = in_call(txn->db, "walrus_txn_commit", commit_body, &a);
	if (txn->open && rc != WALRUS_EMISUSE) {
		/* The call never began (the instance is gone): ended all the same. */
		txn->open = false;
		kill_iters(&txn->iters);
	}
	return rc;
}

static int abort_body(void *arg)
{
	walrus_txn *t = arg;
	t->open = false;
	kill_iters(&t->iters);
	kv_snap_release(&t->snap);
	return WALRUS_OK;
}

int walrus_txn_abort(walrus_txn *txn)
{
	int rc = txn_usable(txn, "walrus_txn_abort");
	if (rc != WALRUS_OK)
		return rc;
	rc = in_call(txn->db, "walrus_txn_abort", abort_body, txn);
	if (txn->open && rc != WALRUS_EMISUSE) {
		txn->open = false;
		kill_iters(&txn->iters);
	}
	return rc;
}

void walrus_txn_free(walrus_txn *txn)
{
	if (txn == NULL || txn->magic != TXN_MAGIC)
		return;
	if (txn->open && txn->db != NULL)
		(void)walrus_txn_abort(txn);
	kill_iters(&txn->iters);
	LIST_DEL(txn);
	kv_batch_free(txn->batch); /* left by a commit a PANIC unwound */
	keyvec_free(&txn->writes);
	keyvec_free(&txn->reads);
	for (size_t i = 0; i < txn->nranges; i++) {
		free(txn->ranges[i].lo);
		free(txn->ranges[i].hi);
	}
	free(txn->ranges);
	txn->magic = 0;
	free(txn);
}
