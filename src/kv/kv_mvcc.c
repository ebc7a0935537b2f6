/*
 * kv_mvcc.c - commit numbers, snapshots and the version store.
 *
 * Every write batch gets a commit sequence number (csn) under the tree
 * lock; csn_visible is the last one committed.  A snapshot is csn_visible
 * at the moment it is taken: it sees every batch up to it and none after.
 *
 * The tree holds only the newest value of each key.  What a snapshot needs
 * besides lives in the version store, a ring in shared memory: while any
 * snapshot is live, a writer notes, before its first change to a key in a
 * batch, the key and the value it had before the batch (or that it had
 * none), tagged with the batch's csn.  For a snapshot S, the value of a key
 * is the "before" of the key's earliest entry with csn > S, or the tree's
 * value when it has none.  Entries are appended in csn order, so the ones
 * a snapshot may need are a suffix of the ring, and the oldest are pruned
 * once no snapshot needs them (csn <= horizon: every live snapshot sees
 * their batch).  This is InnoDB's and Oracle's undo, kept in memory only:
 * snapshots do not outlive the instance, so neither do versions, and
 * recovery, checkpoints, backups and replication never see them.
 *
 * Readers never block writers: they take no lock the writer takes to write,
 * only the snapshot table's spinlock for O(1) to take or release a
 * snapshot.  Writers never block readers: a reader finds an entry through
 * a hash of its key (bucket chains, newest first, each link carrying the
 * csn of the entry it points to, so that a reader never follows a link to
 * an entry it does not need, which may be pruned under it), and a
 * snapshot's ring scan starts at its first entry (mv_snap.from).
 *
 * Ordering: an entry is written before the writer changes the leaf, and the
 * leaf is published by its exclusive lock's release; a reader looks at the
 * versions, reads the tree, then looks again.  If the ring is full of
 * entries live snapshots need, or a snapshot outlives
 * old_snapshot_threshold, the oldest entries go anyway and lost_csn says
 * which snapshots lost them: their reads fail (WALRUS_ESNAPSHOT).
 *
 * One writer at a time changes the ring (the tree lock's holder, or redo
 * on a standby, where nobody else writes): the lock's hand-over orders one
 * writer's stores before the next one's, so the ring's words need no
 * read-modify-write, and readers need only release/acquire pairs, no full
 * barrier (a reader never writes what a writer reads):
 * - an entry's bytes, then its bucket link and the head (release stores):
 *   a reader that loads the link or the head (acquire) sees the entry;
 * - lost_csn, tail_csn and the tail, then the bytes of the space they free
 *   (a release fence between): a reader that read overwritten bytes then
 *   sees lost_csn raised (kv_snap_check's acquire fence before its load);
 *   an entry no live snapshot needs is never read (links carry the csn).
 * The counters of the statistics are changed by the writer alone, with
 * plain stores, once per prune or note.
 *
 * Interface: kv.h ("snapshots").
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kv/kv_int.h"

#define MV_SNAP_MAX 4096u
#define MV_ALIGN                                                                                   \
	32u /* sizeof(mv_ent): a filler to the ring's end always has room for its header           \
	     */
#define MV_ABSENT 0x1u /* the key had no value before the batch */
#define MV_FILLER 0x2u /* the rest of the ring's end: skip to its start */

typedef struct mv_ent {
	uint64_t csn;
	uint64_t next; /* the bucket's older entry: mv_link, 0 = none */
	uint32_t size; /* bytes, header included, a multiple of MV_ALIGN */
	uint16_t klen;
	uint8_t flags;
	uint8_t pad;
	uint32_t vlen;
	uint32_t rel; /* the tree (its key space's relation) */
	              /* key, then value */
} mv_ent;
_Static_assert(sizeof(mv_ent) == MV_ALIGN, "an entry header is one alignment unit");

typedef struct mv_snapslot {
	uint64_t csn;
	uint64_t taken_us;
	uint32_t pid;
	uint32_t used;
} mv_snapslot;

typedef struct mv_shared {
	wr_spinlock lock;  /* the snapshot table and the open batch */
	uint64_t csn_next; /* the tree lock's holder's */
	_Atomic uint64_t csn_visible;
	wr_lsn visible_lsn;          /* the end of csn_visible's batch in the WAL (lock) */
	uint64_t open_csn;           /* the batch being applied, 0 none (lock) */
	uint64_t open_pos;           /* ring position of its first entry (lock) */
	bool open_versioned;         /* it notes versions (lock) */
	uint32_t nsnap, hwm;         /* live snapshots, table slots in use up to (lock) */
	_Atomic uint64_t lost_csn;   /* snapshots below it lost versions they need */
	int64_t max_age_us;          /* old_snapshot_threshold, 0 none */
	uint64_t ring_size;          /* bytes */
	_Atomic uint64_t head, tail; /* logical ring positions */
	_Atomic uint64_t tail_csn;   /* entries below it are gone (links to them are dead) */
	uint32_t nbuckets;
	_Atomic uint64_t entries;                /* live in the ring */
	_Atomic uint64_t noted, pruned, dropped; /* entries made, pruned, dropped early */
	_Atomic uint64_t taken;                  /* snapshots taken */
	mv_snapslot snaps[MV_SNAP_MAX];
	/* then nbuckets _Atomic uint64_t, then the ring */
} mv_shared;

static mv_shared *mv;
static _Atomic uint64_t *mv_buckets;
static char *mv_ring;

/* ---------------------------------------------------------------- links */

/*
 * A link: the entry's ring offset / 8 + 1 (32 bits) and the low 32 bits
 * of its csn, in one word, so that a reader decides whether to follow it
 * before it reads the entry.  csns compare modulo 2^32: the ring never
 * holds entries 2^31 commits apart (mv_note drops older ones first).
 */
static uint64_t mv_link(uint64_t off, uint64_t csn)
{
	return ((off / MV_ALIGN + 1) << 32) | (csn & 0xffffffffu);
}

static uint64_t link_off(uint64_t l)
{
	return ((l >> 32) - 1) * MV_ALIGN;
}

/* Whether the link's csn is after @s. */
static bool link_after(uint64_t l, uint64_t s)
{
	return (int32_t)((uint32_t)l - (uint32_t)s) > 0;
}

static uint32_t key_hash(const void *k, size_t kl)
{
	uint32_t h = 2166136261u; /* FNV-1a */
	for (size_t i = 0; i < kl; i++)
		h = (h ^ ((const unsigned char *)k)[i]) * 16777619u;
	return h;
}

static _Atomic uint64_t *bucket_of(const void *k, size_t kl)
{
	return &mv_buckets[key_hash(k, kl) & (mv->nbuckets - 1)];
}

static mv_ent *ent_at(uint64_t off)
{
	return (mv_ent *)(mv_ring + off);
}

/* An entry read through a link of a reader whose snapshot was since
 * invalidated may be overwritten: every field is checked before use. */
static bool ent_sane(const mv_ent *e, uint64_t off)
{
	return e->size >= sizeof(mv_ent) && e->size <= mv->ring_size - off &&
	       e->klen <= KV_MAX_KEY && (uint64_t)sizeof(mv_ent) + e->klen + e->vlen <= e->size;
}

/* ---------------------------------------------------------------- region */

static uint32_t buckets_for(uint64_t ring)
{
	uint32_t n = 1024;
	while ((uint64_t)n * 256 < ring && n < (1u << 24))
		n <<= 1;
	return n;
}

size_t kv_mvcc_shmem_size(const wr_options *o)
{
	uint64_t ring = (uint64_t)o->snapshot_memory / MV_ALIGN * MV_ALIGN;
	return sizeof(mv_shared) + buckets_for(ring) * sizeof(uint64_t) + ring;
}

static void mv_map(void)
{
	mv_buckets = (_Atomic uint64_t *)(mv + 1);
	mv_ring = (char *)(mv_buckets + mv->nbuckets);
}

int kv_mvcc_shmem_init(const wr_options *o)
{
	uint64_t ring = (uint64_t)o->snapshot_memory / MV_ALIGN * MV_ALIGN;
	mv = shm_alloc("mvcc", kv_mvcc_shmem_size(o));
	if (mv == NULL)
		return wr_error(WALRUS_ENOMEM, "no room for region \"mvcc\" in shared memory");
	spin_init(&mv->lock);
	mv->ring_size = ring;
	mv->nbuckets = buckets_for(ring);
	mv->max_age_us = o->old_snapshot_threshold_us;
	mv_map();
	return WALRUS_OK;
}

int kv_mvcc_attach(void)
{
	mv = shm_lookup("mvcc", NULL);
	if (mv == NULL)
		return wr_error(WALRUS_EPROTO, "shared memory has no \"mvcc\" region");
	mv_map();
	return WALRUS_OK;
}

/* ---------------------------------------------------------------- the horizon */

/* The oldest csn a live snapshot reads as of (csn_visible when none); under
 * the lock.  *@young: the same, snapshots past old_snapshot_threshold left
 * out (@now: the wall clock, 0 to count them all). */
static uint64_t horizons_locked(uint64_t now, uint64_t *young)
{
	uint64_t h = atomic_load(&mv->csn_visible), y = h;
	for (uint32_t i = 0; i < mv->hwm; i++) {
		const mv_snapslot *s = &mv->snaps[i];
		if (!s->used || s->csn >= y)
			continue;
		if (s->csn < h)
			h = s->csn;
		if (now == 0 || now - s->taken_us <= (uint64_t)mv->max_age_us)
			y = s->csn;
	}
	*young = y;
	return h;
}

static uint64_t horizon_locked(void)
{
	uint64_t young;
	return horizons_locked(0, &young);
}

/* The writer's side of a word only it changes (see the file's comment). */
static uint64_t mine(const _Atomic uint64_t *w)
{
	return atomic_load_explicit(w, memory_order_relaxed);
}

/* A statistics counter only the writer changes: no locked instruction. */
static void count(_Atomic uint64_t *c, int64_t n)
{
	atomic_store_explicit(c, mine(c) + (uint64_t)n, memory_order_relaxed);
}

/* What drop_oldest did, counted once per prune. */
typedef struct mv_drops {
	int64_t pruned, dropped;
} mv_drops;

static void count_drops(const mv_drops *d)
{
	if (d->pruned > 0)
		count(&mv->pruned, d->pruned);
	if (d->dropped > 0)
		count(&mv->dropped, d->dropped);
	if (d->pruned + d->dropped > 0)
		count(&mv->entries, -(d->pruned + d->dropped));
}

/* Raises lost_csn to @csn: snapshots below it lost versions they need. */
static void lose_to(uint64_t csn)
{
	if (mine(&mv->lost_csn) < csn)
		atomic_store_explicit(&mv->lost_csn, csn, memory_order_release);
}

/* Drops the ring's oldest entry; one a live snapshot needs is lost to it. */
static void drop_oldest(uint64_t keep_from, mv_drops *d)
{
	uint64_t t = mine(&mv->tail);
	mv_ent *e = ent_at(t % mv->ring_size);
	if (!(e->flags & MV_FILLER)) {
		if (e->csn > keep_from) {
			lose_to(e->csn);
			d->dropped++;
		} else {
			d->pruned++;
		}
		/* A bucket still naming it: nothing older is left behind it. */
		_Atomic uint64_t *b = bucket_of((const char *)(e + 1), e->klen);
		if (mine(b) == mv_link(t % mv->ring_size, e->csn))
			atomic_store_explicit(b, 0, memory_order_relaxed);
		atomic_store_explicit(&mv->tail_csn, e->csn + 1, memory_order_release);
	}
	/* The space is written again only after a release fence (make_room). */
	atomic_store_explicit(&mv->tail, t + e->size, memory_order_release);
}

/* Prunes what no live snapshot needs (@h: one past old_snapshot_threshold
 * loses what it alone needed; @strict: what live snapshots need); under
 * the tree lock (the writer). */
static void prune(uint64_t h, uint64_t strict)
{
	mv_drops d = {0};
	uint64_t head = mine(&mv->head);
	while (mine(&mv->tail) != head) {
		const mv_ent *e = ent_at(mine(&mv->tail) % mv->ring_size);
		if (!(e->flags & MV_FILLER) && e->csn > h)
			break;
		drop_oldest(strict, &d);
	}
	count_drops(&d);
}

/* ---------------------------------------------------------------- the writer */

/* Whether @s holds its slot in the snapshot table (under the lock). */
static bool snap_held_locked(const kv_snap *s)
{
	return s != NULL && s->live && s->slot < mv->hwm && mv->snaps[s->slot].used &&
	       mv->snaps[s->slot].csn == s->csn && mv->snaps[s->slot].taken_us == s->taken_us;
}

/*
 * The horizons for the prune are taken in the same hold of the snapshot
 * table's lock as the csn: the lock's line is shared with every snapshot
 * taken and released, so each hold is likely a cache miss.  A snapshot
 * taken after it reads as of csn_visible or later, at or past both.
 *
 * The snapshot of the transaction the batch commits (@ending) reads
 * nothing after it: the transaction ends with its commit, and its conflict
 * check ran before.  So when it is the only live snapshot, nobody needs
 * the batch's versions, neither to read nor to check a commit (a snapshot
 * taken meanwhile waits for the batch's end: kv_snap_take), and none are
 * noted.
 */
bool kv_mv_batch_begin(const kv_snap *ending)
{
	if (mv == NULL)
		return false;
	bool any = mine(&mv->tail) != mine(&mv->head);
	uint64_t now = any && mv->max_age_us > 0 ? wr_wall_us() : 0, h = 0, young = 0;
	spin_lock(&mv->lock);
	if (any)
		h = horizons_locked(now, &young);
	uint64_t c = ++mv->csn_next;
	mv->open_csn = c;
	mv->open_pos = mine(&mv->head);
	bool versioned = mv->open_versioned = mv->nsnap > (snap_held_locked(ending) ? 1u : 0u);
	spin_unlock(&mv->lock);
	if (any)
		prune(young, h);
	return versioned;
}

void kv_mv_batch_end(bool committed, wr_lsn lsn)
{
	if (mv == NULL)
		return;
	spin_lock(&mv->lock);
	if (committed && lsn > mv->visible_lsn)
		mv->visible_lsn = lsn;
	if (committed)
		atomic_store_explicit(&mv->csn_visible, mv->open_csn, memory_order_release);
	mv->open_csn = 0;
	spin_unlock(&mv->lock);
}

/* Whether this batch noted @k already (its first change is the one kept). */
static bool noted_in_batch(const void *k, uint16_t kl, uint64_t c)
{
	uint64_t l = atomic_load(bucket_of(k, kl));
	while (l != 0 && (uint32_t)l == (uint32_t)c) {
		const mv_ent *e = ent_at(link_off(l));
		if (e->klen == kl && e->rel == kv_cur_rel && memcmp(e + 1, k, kl) == 0)
			return true;
		l = e->next;
	}
	return false;
}

/* Room for @size contiguous bytes at the head: a filler to the ring's end
 * first if needed, and the oldest entries dropped.  The position, or
 * UINT64_MAX when @size can never fit. */
static uint64_t make_room(uint64_t size)
{
	if (size > mv->ring_size / 2)
		return UINT64_MAX;
	uint64_t h = mine(&mv->head);
	uint64_t at_end = mv->ring_size - h % mv->ring_size;
	uint64_t need = at_end < size ? at_end + size : size;
	mv_drops d = {0};
	while (mv->ring_size - (h - mine(&mv->tail)) < need) {
		if (mine(&mv->tail) == h)
			break;
		const mv_ent *e = ent_at(mine(&mv->tail) % mv->ring_size);
		if (!(e->flags & MV_FILLER) && e->csn >= mv->open_csn)
			break; /* this batch alone fills the ring */
		spin_lock(&mv->lock);
		uint64_t keep = horizon_locked();
		spin_unlock(&mv->lock);
		drop_oldest(keep, &d);
	}
	count_drops(&d);
	if (mv->ring_size - (h - mine(&mv->tail)) < need)
		return UINT64_MAX;
	/* lost_csn and the tail moved before the space is written again (the
	 * file's comment): a store-store order, which x86 keeps anyway. */
	atomic_thread_fence(memory_order_release);
	if (at_end < size) {
		mv_ent *f = ent_at(h % mv->ring_size);
		memset(f, 0, sizeof(*f));
		f->flags = MV_FILLER;
		f->size = (uint32_t)at_end;
		h += at_end;
		atomic_store_explicit(&mv->head, h, memory_order_release);
	}
	return h;
}

/* Every snapshot older than the open batch loses: its versions cannot be kept. */
static void lose_open_batch(void)
{
	lose_to(mv->open_csn);
	count(&mv->dropped, 1);
}

/*
 * Room for an entry of @k with a value of @vlen bytes, the key written: the
 * value goes at the pointer returned, then publish_entry.  NULL when the
 * entry need not (noted already in this batch) or cannot be made (*lost).
 */
static char *reserve_entry(const void *k, uint16_t kl, uint32_t vlen, uint64_t *pos)
{
	if (noted_in_batch(k, kl, mv->open_csn))
		return NULL;
	uint64_t size = (sizeof(mv_ent) + kl + vlen + MV_ALIGN - 1) / MV_ALIGN * MV_ALIGN;
	*pos = make_room(size);
	if (*pos == UINT64_MAX) {
		lose_open_batch();
		return NULL;
	}
	mv_ent *e = ent_at(*pos % mv->ring_size);
	e->size = (uint32_t)size;
	memcpy(e + 1, k, kl);
	return (char *)(e + 1) + kl;
}

static void publish_entry(uint64_t pos, const void *k, uint16_t kl, bool absent, uint32_t vlen)
{
	uint64_t off = pos % mv->ring_size, c = mv->open_csn;
	mv_ent *e = ent_at(off);
	_Atomic uint64_t *b = bucket_of(k, kl);
	e->csn = c;
	e->next = mine(b);
	e->klen = kl;
	e->flags = absent ? MV_ABSENT : 0;
	e->vlen = vlen;
	e->rel = kv_cur_rel;
	/* The entry before its link and the head (the file's comment). */
	atomic_store_explicit(&mv->head, pos + e->size, memory_order_release);
	atomic_store_explicit(b, mv_link(off, c), memory_order_release);
	count(&mv->entries, 1);
	count(&mv->noted, 1);
}

static bool noting(void)
{
	return mv != NULL && mv->open_csn != 0 && mv->open_versioned;
}

int kv_mv_note(const void *k, uint16_t kl, const kv_leaf_ent *old)
{
	if (!noting())
		return WALRUS_OK;
	uint32_t vlen = old != NULL ? old->vlen : 0;
	uint64_t pos;
	char *v = reserve_entry(k, kl, vlen, &pos);
	if (v == NULL)
		return WALRUS_OK;
	if (old != NULL && old->kind == KV_OVERFLOW) {
		int rc = kv_ovf_read(&old->ref, v);
		if (rc != WALRUS_OK)
			return rc == KV_RETRY
			           ? wr_error(WALRUS_ECORRUPT,
			                      "an overflow chain changed under its writer")
			           : rc;
	} else if (vlen > 0) {
		memcpy(v, old->val, vlen);
	}
	publish_entry(pos, k, kl, old == NULL, vlen);
	return WALRUS_OK;
}

void kv_mv_note_value(const void *k, uint16_t kl, bool absent, const char *val, uint32_t vlen)
{
	if (!noting())
		return;
	uint64_t pos;
	char *v = reserve_entry(k, kl, absent ? 0 : vlen, &pos);
	if (v == NULL)
		return;
	if (!absent && vlen > 0)
		memcpy(v, val, vlen);
	publish_entry(pos, k, kl, absent, absent ? 0 : vlen);
}

void kv_mv_lose_open_batch(void)
{
	if (noting())
		lose_open_batch();
}

/* ---------------------------------------------------------------- snapshots */

int kv_snap_take(kv_snap *s)
{
	uint32_t me = (uint32_t)getpid(); /* a system call: not inside the spinlock */
	memset(s, 0, sizeof(*s));
	for (;;) {
		spin_lock(&mv->lock);
		uint64_t vis = atomic_load(&mv->csn_visible), open = mv->open_csn;
		bool wait = open > vis && !mv->open_versioned;
		if (!wait) {
			uint32_t i = 0;
			while (i < MV_SNAP_MAX && mv->snaps[i].used)
				i++;
			if (i == MV_SNAP_MAX) {
				spin_unlock(&mv->lock);
				return wr_error(
				    WALRUS_ELIMIT,
				    "too many live snapshots and transactions (%u): release "
				    "some",
				    MV_SNAP_MAX);
			}
			s->csn = vis;
			s->lsn = mv->visible_lsn;
			s->slot = i;
			s->from = open > vis ? mv->open_pos : atomic_load(&mv->head);
			s->taken_us = wr_wall_us();
			mv->snaps[i] = (mv_snapslot){
			    .csn = vis, .taken_us = s->taken_us, .pid = me, .used = 1};
			if (i >= mv->hwm)
				mv->hwm = i + 1;
			mv->nsnap++;
			spin_unlock(&mv->lock);
			atomic_fetch_add(&mv->taken, 1);
			s->live = true;
			return WALRUS_OK;
		}
		spin_unlock(&mv->lock);
		/* A batch that began with no snapshot live (but the one of the
		 * transaction it commits) notes no versions: it must end before
		 * a snapshot can be taken (it is short: it holds the tree lock
		 * and does no I/O it waits on for long). */
		for (;;) {
			spin_lock(&mv->lock);
			bool same = mv->open_csn == open;
			spin_unlock(&mv->lock);
			if (!same)
				break;
			wr_sleep_us(20);
		}
	}
}

void kv_snap_release(kv_snap *s)
{
	if (!s->live || mv == NULL)
		return;
	spin_lock(&mv->lock);
	mv_snapslot *e = &mv->snaps[s->slot];
	if (e->used && e->csn == s->csn && e->taken_us == s->taken_us) {
		e->used = 0;
		mv->nsnap--;
		while (mv->hwm > 0 && !mv->snaps[mv->hwm - 1].used)
			mv->hwm--;
	}
	spin_unlock(&mv->lock);
	s->live = false;
}

void kv_snap_release_pid(uint32_t pid)
{
	if (mv == NULL)
		return;
	spin_lock(&mv->lock);
	for (uint32_t i = 0; i < mv->hwm; i++)
		if (mv->snaps[i].used && mv->snaps[i].pid == pid) {
			mv->snaps[i].used = 0;
			mv->nsnap--;
		}
	while (mv->hwm > 0 && !mv->snaps[mv->hwm - 1].used)
		mv->hwm--;
	spin_unlock(&mv->lock);
}

#ifdef WALRUS_TEST_HOOKS
void kv_test_snap_lock_hold(void)
{
	spin_lock(&mv->lock);
}
#endif

int kv_snap_check(const kv_snap *s)
{
	/* The ring's bytes the caller read, before lost_csn (the file's comment). */
	atomic_thread_fence(memory_order_acquire);
	if (atomic_load(&mv->lost_csn) > s->csn)
		return wr_error(WALRUS_ESNAPSHOT,
		                "snapshot too old: versions it needs were dropped to make room "
		                "(snapshot_memory is %llu bytes)",
		                (unsigned long long)mv->ring_size);
	if (mv->max_age_us > 0 && wr_wall_us() - s->taken_us > (uint64_t)mv->max_age_us)
		return wr_error(WALRUS_ESNAPSHOT,
		                "snapshot too old: taken %.1f s ago, old_snapshot_threshold is "
		                "%.1f s",
		                (double)(wr_wall_us() - s->taken_us) / 1e6,
		                (double)mv->max_age_us / 1e6);
	return WALRUS_OK;
}

/* ---------------------------------------------------------------- readers */

int kv_mv_lookup(const kv_snap *s, wr_relid rel, const void *k, size_t kl, kv_version *out)
{
	out->found = false;
	uint64_t l = atomic_load(bucket_of(k, kl));
	/* A chain is at most the ring's entries long; a longer walk went through
	 * entries dropped under a snapshot that lost them (checked below). */
	uint64_t steps = mv->ring_size / MV_ALIGN;
	while (l != 0 && link_after(l, s->csn) && steps-- > 0) {
		if (!link_after(l, atomic_load(&mv->tail_csn) - 1))
			break; /* dropped: only a snapshot that lost versions needed it */
		uint64_t off = link_off(l);
		const mv_ent *e = ent_at(off);
		if (!ent_sane(e, off))
			break;
		if (e->klen == kl && e->rel == rel && memcmp(e + 1, k, kl) == 0) {
			out->found = true; /* the earliest after s wins: keep looking */
			out->absent = (e->flags & MV_ABSENT) != 0;
			out->val = (const char *)(e + 1) + kl;
			out->vlen = e->vlen;
			out->csn = e->csn;
		}
		l = e->next;
	}
	return kv_snap_check(s);
}

int kv_mv_scan(const kv_snap *s, uint64_t *pos, kv_mv_fn fn, void *arg)
{
	uint64_t p = *pos, head = atomic_load(&mv->head);
	while (p < head) {
		uint64_t off = p % mv->ring_size;
		const mv_ent *e = ent_at(off);
		if (e->size < MV_ALIGN || e->size > mv->ring_size - off ||
		    (!(e->flags & MV_FILLER) && !ent_sane(e, off)))
			break; /* lost: kv_snap_check says so */
		if (!(e->flags & MV_FILLER) && e->csn > s->csn) {
			kv_version v = {.found = true,
			                .absent = (e->flags & MV_ABSENT) != 0,
			                .val = (const char *)(e + 1) + e->klen,
			                .vlen = e->vlen,
			                .csn = e->csn};
			int rc = fn(arg, e->rel, (const char *)(e + 1), e->klen, &v);
			if (rc != WALRUS_OK)
				return rc;
		}
		p += e->size;
	}
	*pos = p;
	return kv_snap_check(s);
}

bool kv_mv_none_after(const kv_snap *s)
{
	return atomic_load(&mv->head) == s->from;
}

uint64_t kv_mv_visible(void)
{
	return atomic_load(&mv->csn_visible);
}

void kv_mv_get_stats(kv_mv_stats *st)
{
	memset(st, 0, sizeof(*st));
	if (mv == NULL)
		return;
	uint64_t now = wr_wall_us(), oldest = 0;
	spin_lock(&mv->lock);
	st->snapshots = mv->nsnap;
	uint64_t h = horizon_locked();
	for (uint32_t i = 0; i < mv->hwm; i++)
		if (mv->snaps[i].used && (oldest == 0 || mv->snaps[i].taken_us < oldest))
			oldest = mv->snaps[i].taken_us;
	spin_unlock(&mv->lock);
	st->oldest_age_us = oldest != 0 && now > oldest ? now - oldest : 0;
	st->csn = atomic_load(&mv->csn_visible);
	st->horizon = h;
	st->versions = atomic_load(&mv->entries);
	st->version_bytes = atomic_load(&mv->head) - atomic_load(&mv->tail);
	st->ring_bytes = mv->ring_size;
	st->noted = atomic_load(&mv->noted);
	st->pruned = atomic_load(&mv->pruned);
	st->dropped = atomic_load(&mv->dropped);
	st->taken = atomic_load(&mv->taken);
}
