/*
 * kv_view.c - reads as of a snapshot: point gets and view iterators.
 *
 * A get as of snapshot S looks for the key's earliest version after S
 * (kv_mvcc.c); without one it reads the tree, then looks again: a batch
 * that changed the key in between noted its version before the leaf
 * changed, so the second look finds it whenever the tree read saw the
 * change.
 *
 * A view iterator walks the tree with an ordinary iterator (kv_iter.c) and
 * merges two sorted lists into it: the versions after S of the keys in its
 * range (the value each had at S, or that it had none), and an overlay (a
 * transaction's own writes, which win over both).  The versions are read
 * from the ring incrementally, after every tree move that may have copied a
 * new leaf: whatever change that copy shows was noted before it, so the
 * copy's entries are always judged with their versions at hand.  A key
 * deleted after S is in no leaf but is in the versions, and comes from
 * there.
 *
 * Interface: kv.h ("snapshots").
 */
#include <stdlib.h>
#include <string.h>

#include "kv/kv_int.h"

int kv_key_order(const void *a, size_t al, const void *b, size_t bl)
{
	return kv_cmp(a, al, b, bl);
}

/* ---------------------------------------------------------------- gets */

typedef struct snap_dst {
	void **v; /* malloc'd value, or */
	void *buf;
	size_t cap;
	size_t *vl;
	kv_leaf_hint *hint; /* the tree read's leaf, or NULL */
} snap_dst;

static int tree_get(wr_relid rel, const void *k, size_t kl, snap_dst *d)
{
	return kv_get_hinted(rel, k, kl, d->v, d->buf, d->cap, d->vl, d->hint);
}

static int give_version(const kv_snap *s, const kv_version *ver, snap_dst *d)
{
	if (ver->absent)
		return wr_error(WALRUS_ENOTFOUND, "key not found");
	*d->vl = ver->vlen;
	if (d->v != NULL) {
		char *p = malloc(ver->vlen > 0 ? ver->vlen : 1);
		if (p == NULL)
			return wr_error(WALRUS_ENOMEM, "out of memory for a value of %u bytes",
			                ver->vlen);
		memcpy(p, ver->val, ver->vlen);
		int rc = kv_snap_check(s); /* the copy came from a ring that may have moved on */
		if (rc != WALRUS_OK) {
			free(p);
			return rc;
		}
		*d->v = p;
		return WALRUS_OK;
	}
	if (ver->vlen > d->cap)
		return wr_error(WALRUS_ETOOBIG,
		                "buffer too small: the value is %u bytes, the buffer %zu",
		                ver->vlen, d->cap);
	memcpy(d->buf, ver->val, ver->vlen);
	return kv_snap_check(s);
}

static int snap_get(const kv_snap *s, wr_relid rel, const void *k, size_t kl, snap_dst *d)
{
	int rc = kv_check_key(kl);
	if (rc != WALRUS_OK)
		return rc;
	/* Nothing noted since the snapshot, before and after the tree read: the
	 * tree is what it sees, and no hash of the key is needed. */
	if (kv_mv_none_after(s)) {
		rc = tree_get(rel, k, kl, d);
		atomic_thread_fence(memory_order_seq_cst);
		if (kv_mv_none_after(s)) {
			int crc = kv_snap_check(s);
			if (crc != WALRUS_OK && rc == WALRUS_OK && d->v != NULL) {
				free(*d->v);
				*d->v = NULL;
			}
			return crc != WALRUS_OK ? crc : rc;
		}
		if (rc == WALRUS_OK && d->v != NULL) {
			free(*d->v);
			*d->v = NULL;
		}
	}
	kv_version ver;
	rc = kv_mv_lookup(s, rel, k, kl, &ver);
	if (rc != WALRUS_OK)
		return rc;
	if (ver.found)
		return give_version(s, &ver, d);
	rc = tree_get(rel, k, kl, d);
	if (rc != WALRUS_OK && rc != WALRUS_ENOTFOUND)
		return rc;
	atomic_thread_fence(memory_order_seq_cst);
	int vrc = kv_mv_lookup(s, rel, k, kl, &ver);
	if (vrc == WALRUS_OK && !ver.found)
		return rc;
	if (rc == WALRUS_OK && d->v != NULL) {
		free(*d->v);
		*d->v = NULL;
	}
	return vrc != WALRUS_OK ? vrc : give_version(s, &ver, d);
}

int kv_snap_get(const kv_snap *s, wr_relid rel, const void *k, size_t kl, void **v, size_t *vl)
{
	*v = NULL;
	*vl = 0;
	snap_dst d = {.v = v, .vl = vl};
	return snap_get(s, rel, k, kl, &d);
}

int kv_snap_get_into(const kv_snap *s, wr_relid rel, const void *k, size_t kl, void *buf,
                     size_t cap, size_t *vl)
{
	*vl = 0;
	snap_dst d = {.buf = buf, .cap = cap, .vl = vl};
	return snap_get(s, rel, k, kl, &d);
}

int kv_snap_get_hinted(const kv_snap *s, wr_relid rel, const void *k, size_t kl, void **v,
                       void *buf, size_t cap, size_t *vl, kv_leaf_hint *hint)
{
	*vl = 0;
	hint->blk = 0;
	if (v != NULL)
		*v = NULL;
	snap_dst d = {.v = v, .buf = buf, .cap = cap, .vl = vl, .hint = hint};
	return snap_get(s, rel, k, kl, &d);
}

/* ---------------------------------------------------------------- view iterators */

/* A key's version or overlay entry, in the iterator's memory. */
typedef struct vent {
	char *k, *v;
	uint16_t kl;
	uint32_t vl;
	bool gone; /* absent at the snapshot, or deleted by the overlay */
} vent;

typedef struct vlist {
	vent *e;
	size_t n, cap;
} vlist;

enum { FWD = 1, BACK = -1 };

struct kv_viter {
	const kv_snap *s;
	wr_relid rel;
	kv_iter *it;
	const kv_iter_cur *tc; /* the tree iterator's entry */
	char lo[KV_MAX_KEY], hi[KV_MAX_KEY];
	uint16_t lol, hil;
	bool has_lo, has_hi;
	vlist vers;          /* versions after the snapshot, by key */
	vlist ov;            /* the overlay, by key */
	uint64_t pos;        /* ring position read up to */
	size_t vnext, onext; /* first entries of vers, ov after cur (SIZE_MAX: unknown) */
	bool on_tree;        /* the entry is the tree iterator's own (tc), not cur */
	kv_iter_cur cur;
	char key[KV_MAX_KEY];
};

static int cmp(const char *a, size_t al, const char *b, size_t bl)
{
	return kv_cmp(a, (uint16_t)al, b, (uint16_t)bl);
}

static bool in_range(const kv_viter *v, const char *k, size_t kl)
{
	return (!v->has_lo || cmp(k, kl, v->lo, v->lol) >= 0) &&
	       (!v->has_hi || cmp(k, kl, v->hi, v->hil) < 0);
}

/* The first index whose key is >= k. */
static size_t lower(const vlist *l, const char *k, size_t kl)
{
	size_t a = 0, b = l->n;
	while (a < b) {
		size_t m = (a + b) / 2;
		if (cmp(l->e[m].k, l->e[m].kl, k, kl) < 0)
			a = m + 1;
		else
			b = m;
	}
	return a;
}

static const vent *find(const vlist *l, const char *k, size_t kl)
{
	size_t i = lower(l, k, kl);
	return i < l->n && cmp(l->e[i].k, l->e[i].kl, k, kl) == 0 ? &l->e[i] : NULL;
}

/* Inserts a copy, unless the key is there already (the earlier one stays). */
static int vlist_add(vlist *l, const char *k, uint16_t kl, const char *v, uint32_t vl, bool gone)
{
	size_t i = lower(l, k, kl);
	if (i < l->n && cmp(l->e[i].k, l->e[i].kl, k, kl) == 0)
		return WALRUS_OK;
	if (wr_grow(&l->e, &l->cap, l->n + 1, sizeof(vent), 16) != WALRUS_OK)
		return wr_error(WALRUS_ENOMEM, "out of memory for a view iterator");
	vent e = {.k = malloc((size_t)kl + vl + 1), .kl = kl, .vl = vl, .gone = gone};
	if (e.k == NULL)
		return wr_error(WALRUS_ENOMEM, "out of memory for a view iterator");
	memcpy(e.k, k, kl);
	e.v = e.k + kl;
	if (vl > 0)
		memcpy(e.v, v, vl);
	memmove(&l->e[i + 1], &l->e[i], (l->n - i) * sizeof(vent));
	l->e[i] = e;
	l->n++;
	return WALRUS_OK;
}

static void vlist_free(vlist *l)
{
	for (size_t i = 0; i < l->n; i++)
		free(l->e[i].k);
	free(l->e);
	memset(l, 0, sizeof(*l));
}

static int add_version(void *arg, wr_relid rel, const char *k, uint16_t kl, const kv_version *ver)
{
	kv_viter *v = arg;
	if (rel != v->rel || !in_range(v, k, kl))
		return WALRUS_OK;
	return vlist_add(&v->vers, k, kl, ver->val, ver->absent ? 0 : ver->vlen, ver->absent);
}

/* The versions noted since the last look: after every tree move that may copy a leaf. */
static int refresh(kv_viter *v)
{
	size_t n = v->vers.n;
	int rc = kv_mv_scan(v->s, &v->pos, add_version, v);
	if (v->vers.n != n)
		v->vnext = SIZE_MAX;
	return rc;
}

const kv_iter_cur *kv_viter_current(const kv_viter *v)
{
	return v->on_tree ? v->tc : &v->cur;
}

/* The first entry of @l after the current key, cached in *@at. */
static size_t after_cur(const kv_viter *v, const vlist *l, size_t *at)
{
	if (*at == SIZE_MAX) {
		const kv_iter_cur *c = kv_viter_current(v);
		size_t i = lower(l, c->key, c->klen);
		if (i < l->n && cmp(l->e[i].k, l->e[i].kl, c->key, c->klen) == 0)
			i++;
		*at = i;
	}
	return *at;
}

bool kv_viter_next_local(kv_viter *v)
{
	if (!v->on_tree)
		return false; /* the entry came from a list */
	bool plain = v->vers.n == 0 && v->ov.n == 0;
	/* The lists' next entries after the current key, before the tree moves off it. */
	size_t vi = plain ? 0 : after_cur(v, &v->vers, &v->vnext);
	size_t oi = plain ? 0 : after_cur(v, &v->ov, &v->onext);
	size_t kl = v->tc->klen;
	if (!plain)
		memcpy(v->key, v->tc->key, kl); /* the bound kv_viter_next needs if we stop */
	if (!kv_iter_next_local(v->it))
		return false; /* the copy ran out: the tree is still on the entry */
	if (plain)
		return true; /* nothing changed since the snapshot: the tree is it */
	const char *tk = v->tc->key;
	size_t tkl = v->tc->klen;
	if ((vi < v->vers.n && cmp(v->vers.e[vi].k, v->vers.e[vi].kl, tk, tkl) <= 0) ||
	    (oi < v->ov.n && cmp(v->ov.e[oi].k, v->ov.e[oi].kl, tk, tkl) <= 0)) {
		/* A list entry comes first, or is this key: kv_viter_next goes on from
		 * the key we left, the tree already on its next entry. */
		v->on_tree = false;
		v->cur.valid = true;
		v->cur.key = v->key;
		v->cur.klen = kl;
		return false;
	}
	return true; /* the tree's own entry: its key and value stay in its copy */
}

static int tree_move(kv_viter *v, int dir)
{
	if (dir == FWD && kv_iter_next_local(v->it))
		return WALRUS_OK;
	int rc = dir == FWD ? kv_iter_next(v->it) : kv_iter_prev(v->it);
	return rc == WALRUS_OK ? refresh(v) : rc;
}

/* The tree's key, if the tree iterator is on one. */
static bool tree_key(const kv_viter *v, const char **k, size_t *kl)
{
	if (!v->tc->valid)
		return false;
	*k = v->tc->key;
	*kl = v->tc->klen;
	return true;
}

/*
 * The next visible key from bound @b (inclusive when @incl) in direction
 * @dir, the tree iterator already on its first key on that side of @b (or
 * off the end).  Sets cur.
 */
static int settle(kv_viter *v, const char *b, size_t bl, bool incl, bool have_b, int dir)
{
	char bound[KV_MAX_KEY];
	if (have_b) {
		memcpy(bound, b, bl);
		b = bound;
	}
	for (;;) {
		const char *best = NULL;
		size_t bestl = 0;
		const char *tk = NULL;
		size_t tkl = 0;
		bool tree = tree_key(v, &tk, &tkl);
		if (tree) {
			best = tk;
			bestl = tkl;
		}
		const vlist *lists[2] = {&v->vers, &v->ov};
		for (int li = 0; li < 2; li++) {
			const vlist *l = lists[li];
			if (l->n == 0)
				continue;
			size_t i;
			if (dir == FWD) {
				i = have_b ? lower(l, b, bl) : 0;
				if (have_b && !incl && i < l->n &&
				    cmp(l->e[i].k, l->e[i].kl, b, bl) == 0)
					i++;
				if (i >= l->n)
					continue;
			} else {
				size_t j = have_b ? lower(l, b, bl) : l->n;
				if (have_b && incl && j < l->n &&
				    cmp(l->e[j].k, l->e[j].kl, b, bl) == 0)
					j++;
				if (j == 0)
					continue;
				i = j - 1;
			}
			const vent *e = &l->e[i];
			int c = best == NULL ? -dir : cmp(e->k, e->kl, best, bestl);
			if (c * dir < 0) {
				best = e->k;
				bestl = e->kl;
			}
		}
		if (best == NULL) {
			v->cur.valid = false;
			v->on_tree = false;
			v->vnext = v->onext = SIZE_MAX;
			return WALRUS_OK;
		}
		memcpy(v->key, best, bestl);
		size_t kl = bestl;
		bool from_tree = tree && cmp(tk, tkl, v->key, kl) == 0;
		const vent *o = find(&v->ov, v->key, kl),
		           *ver = o ? NULL : find(&v->vers, v->key, kl);
		const vent *e = o != NULL ? o : ver;
		if (e == NULL || !e->gone) {
			v->vnext = v->onext = SIZE_MAX;
			v->on_tree = e == NULL; /* the tree's entry: the next may be local */
			if (v->on_tree)
				return WALRUS_OK;
			v->cur.valid = true;
			v->cur.key = v->key;
			v->cur.klen = kl;
			v->cur.val = e->v;
			v->cur.vlen = e->vl;
			return WALRUS_OK;
		}
		/* Not there at the snapshot, or deleted here: past it. */
		b = v->key;
		memcpy(bound, v->key, kl);
		b = bound;
		bl = kl;
		incl = false;
		have_b = true;
		if (from_tree) {
			int rc = tree_move(v, dir);
			if (rc != WALRUS_OK)
				return rc;
		}
	}
}

static int copy_overlay(kv_viter *v, const kv_overlay_ent *ov, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		if (!in_range(v, ov[i].k, ov[i].kl))
			continue;
		int rc = vlist_add(&v->ov, ov[i].k, ov[i].kl, ov[i].v, ov[i].deleted ? 0 : ov[i].vl,
		                   ov[i].deleted);
		if (rc != WALRUS_OK)
			return rc;
	}
	return WALRUS_OK;
}

int kv_viter_open(const kv_snap *s, wr_relid rel, const kv_overlay_ent *ov, size_t nov,
                  const void *lo, size_t lol, const void *hi, size_t hil, kv_viter **out)
{
	*out = NULL;
	if ((lo != NULL && lol > KV_MAX_KEY) || (hi != NULL && hil > KV_MAX_KEY))
		return wr_error(WALRUS_ETOOBIG, "a bound of an iterator is over %u bytes",
		                KV_MAX_KEY);
	/* *out holds it from the start: a PANIC unwinds past this frame
	 * (longjmp), and the caller's cleanup must still find it (and its
	 * tree iterator, which kv_iter_open publishes in v->it as early). */
	kv_viter *v = *out = calloc(1, sizeof(*v));
	if (v == NULL)
		return wr_error(WALRUS_ENOMEM, "out of memory for a view iterator");
	v->s = s;
	v->rel = rel;
	v->pos = s->from;
	v->vnext = v->onext = SIZE_MAX;
	if (lo != NULL && lol > 0) {
		memcpy(v->lo, lo, lol);
		v->lol = (uint16_t)lol;
		v->has_lo = true;
	}
	if (hi != NULL && hil > 0) {
		memcpy(v->hi, hi, hil);
		v->hil = (uint16_t)hil;
		v->has_hi = true;
	}
	int rc = copy_overlay(v, ov, nov);
	if (rc == WALRUS_OK)
		rc = kv_iter_open_in(rel, lo, lol, hi, hil, &v->it);
	if (rc == WALRUS_OK) {
		v->tc = kv_iter_current(v->it);
		rc = refresh(v);
	}
	if (rc == WALRUS_OK)
		rc = settle(v, NULL, 0, true, false, FWD);
	if (rc != WALRUS_OK) {
		kv_viter_close(v);
		*out = NULL;
	}
	return rc;
}

int kv_viter_seek(kv_viter *v, const void *k, size_t kl)
{
	int rc = kv_iter_seek(v->it, k, kl);
	if (rc == WALRUS_OK)
		rc = refresh(v);
	if (rc != WALRUS_OK)
		return rc;
	bool have = k != NULL && kl > 0 && (!v->has_lo || cmp(k, kl, v->lo, v->lol) > 0);
	return have ? settle(v, k, kl, true, true, FWD)
	            : settle(v, v->lo, v->lol, true, v->has_lo, FWD);
}

int kv_viter_seek_last(kv_viter *v)
{
	int rc = kv_iter_seek_last(v->it);
	if (rc == WALRUS_OK)
		rc = refresh(v);
	if (rc != WALRUS_OK)
		return rc;
	return settle(v, v->hi, v->hil, false, v->has_hi, BACK);
}

int kv_viter_next(kv_viter *v)
{
	const kv_iter_cur *c = kv_viter_current(v);
	if (!c->valid)
		return WALRUS_OK;
	char k[KV_MAX_KEY];
	size_t kl = c->klen;
	memcpy(k, c->key, kl);
	/* The tree iterator is on the current key or past it. */
	const char *tk = NULL;
	size_t tkl = 0;
	while (tree_key(v, &tk, &tkl) && cmp(tk, tkl, k, kl) <= 0) {
		int rc = tree_move(v, FWD);
		if (rc != WALRUS_OK)
			return rc;
	}
	return settle(v, k, kl, false, true, FWD);
}

int kv_viter_prev(kv_viter *v)
{
	const kv_iter_cur *c = kv_viter_current(v);
	if (!c->valid)
		return WALRUS_OK;
	char k[KV_MAX_KEY];
	size_t kl = c->klen;
	memcpy(k, c->key, kl);
	/* The tree iterator onto the last tree key below it. */
	int rc = kv_iter_seek(v->it, k, kl);
	if (rc == WALRUS_OK)
		rc = refresh(v);
	if (rc == WALRUS_OK)
		rc = v->tc->valid ? tree_move(v, BACK) : kv_iter_seek_last(v->it);
	if (rc == WALRUS_OK && !v->tc->valid)
		rc = WALRUS_OK;
	const char *tk = NULL;
	size_t tkl = 0;
	while (rc == WALRUS_OK && tree_key(v, &tk, &tkl) && cmp(tk, tkl, k, kl) >= 0)
		rc = tree_move(v, BACK);
	if (rc == WALRUS_OK)
		rc = refresh(v);
	return rc == WALRUS_OK ? settle(v, k, kl, false, true, BACK) : rc;
}

void kv_viter_close(kv_viter *v)
{
	if (v == NULL)
		return;
	if (v->it != NULL)
		kv_iter_close(v->it);
	vlist_free(&v->vers);
	vlist_free(&v->ov);
	free(v);
}
