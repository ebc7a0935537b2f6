/*
 * bufmgr.c - the buffer pool's region, reads, extension, I/O, content locks
 * and private pin bookkeeping.
 *
 * Interface: buffer.h.  Locking rules and invariants: README.md here.
 *
 * Reading a page: first try the buffer where this process last found the
 * tag (a private hint: pin it, then check its tag, see buf_hint_pin), else
 * look the tag up under its partition lock (shared) and pin the buffer
 * before letting the lock go, so it cannot be retagged in between.  On a
 * miss, take a victim from the clock sweep, write it if it is dirty (WAL
 * first), then under the old and new partition locks (exclusive) check
 * that nobody mapped the new tag meanwhile and nobody pinned or dirtied the
 * victim, and move its table entry.  The I/O itself happens with only a pin
 * and the I/O-in-progress flag held: whoever sets the flag first reads,
 * everyone else sleeps on the buffer's futex word until it clears.
 *
 * Optimistic reads (buf_peek): each descriptor has a version word, a
 * seqlock: it is odd while the content lock is held exclusive or the buffer
 * is being retagged, and changes at each.  A peek reads it, checks the
 * buffer is valid and holds the tag, lets its caller read the page, and
 * reads the version again: unchanged and even means no exclusive holder or
 * retag overlapped the read, which then saw the page as a share lock would.
 */
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "buffer/buf_int.h"
#include "wal/wal.h"

buf_local buf_l;
static buf_write_observer buf_observer;

/* Waits for another process's I/O re-check this often (a wake is never
 * lost, but a crash restart may leave the flag set forever). */
#define BUF_IO_WAIT_NS (10ull * 1000 * 1000)

/* ---------------------------------------------------------------- region */

typedef struct buf_layout_t {
	uint32_t nbuckets;
	uint64_t desc_off, bucket_off, entry_off, entry_end, total;
} buf_layout_t;

static buf_layout_t buf_layout(uint32_t n)
{
	buf_layout_t l;
	l.nbuckets = 32;
	while (l.nbuckets < 2 * n)
		l.nbuckets <<= 1;
	l.desc_off = WR_ALIGN_UP(sizeof(buf_region), 64);
	l.bucket_off = l.desc_off + (uint64_t)n * sizeof(buf_desc);
	l.entry_off = WR_ALIGN_UP(l.bucket_off + (uint64_t)l.nbuckets * sizeof(int32_t), 64);
	l.entry_end = l.entry_off + (uint64_t)n * sizeof(buf_entry);
	/* Room to put the pages on an aligned address (buf_page_offset). */
	l.total = l.entry_end + SMGR_DIRECT_ALIGN + (uint64_t)n * WR_PAGE_SIZE;
	return l;
}

static uint32_t buf_count(const wr_options *o)
{
	int64_t n = o->shared_buffers / WR_PAGE_SIZE;
	return n < 0 ? 0 : (uint32_t)WR_MIN(n, (int64_t)INT32_MAX);
}

size_t buf_shmem_size(const wr_options *o)
{
	return (size_t)buf_layout(WR_MAX(buf_count(o), BUF_MIN_BUFFERS)).total;
}

/*
 * Where the pages start in region @r: the first address past the mapping
 * table aligned to SMGR_DIRECT_ALIGN, as O_DIRECT reads and writes need
 * (and whole pages of memory).  The region's own offset in shared memory
 * is only cache-line aligned, so the address decides, not the offset; every
 * process maps the segment at a page boundary, where the same offset is
 * just as aligned.
 */
static uint64_t buf_page_offset(const buf_region *r, const buf_layout_t *l)
{
	uintptr_t start = (uintptr_t)r + l->entry_end;
	return WR_ALIGN_UP(start, SMGR_DIRECT_ALIGN) - (uintptr_t)r;
}

/* Points this process's view at @r. */
static void buf_map(buf_region *r)
{
	char *base = (char *)r;
	buf_l.r = r;
	buf_l.desc = (buf_desc *)(base + r->desc_off);
	buf_l.buckets = (int32_t *)(base + r->bucket_off);
	buf_l.entries = (buf_entry *)(base + r->entry_off);
	buf_l.pages = base + r->page_off;
	WR_ASSERT((uintptr_t)buf_l.pages % SMGR_DIRECT_ALIGN == 0);
}

/*
 * A pool larger than the machine's memory would be created (memfd pages are
 * allocated lazily) and then kill processes with SIGBUS or the OOM killer
 * while they run: refuse it at open instead.
 */
static int buf_check_memory(const wr_options *o, uint64_t bytes)
{
	long pages = sysconf(_SC_PHYS_PAGES), psize = sysconf(_SC_PAGESIZE);
	if (pages <= 0 || psize <= 0)
		return WALRUS_OK; /* unknown: the memfd reservation still checks */
	uint64_t phys = (uint64_t)pages * (uint64_t)psize;
	if (bytes > phys / 4 * 3)
		return wr_error(
		    WALRUS_EINVAL,
		    "shared_buffers = %lld MB needs %llu MB of shared memory, more than "
		    "3/4 of this machine's %llu MB of memory",
		    (long long)(o->shared_buffers >> 20), (unsigned long long)(bytes >> 20),
		    (unsigned long long)(phys >> 20));
	return WALRUS_OK;
}

int buf_shmem_init(const wr_options *o)
{
	uint32_t n = buf_count(o);
	if (n < BUF_MIN_BUFFERS)
		return wr_error(WALRUS_EINVAL,
		                "shared_buffers = %lld bytes is %u pages; the buffer pool needs at "
		                "least %d pages of %d bytes (%d kB)",
		                (long long)o->shared_buffers, n, BUF_MIN_BUFFERS, WR_PAGE_SIZE,
		                BUF_MIN_BUFFERS * WR_PAGE_SIZE / 1024);
	buf_layout_t l = buf_layout(n);
	int rc = buf_check_memory(o, l.total);
	if (rc != WALRUS_OK)
		return rc;
	buf_region *r = shm_alloc("buffers", l.total);
	if (r == NULL)
		return wr_error(WALRUS_ENOMEM,
		                "no room in shared memory for %u buffers (%llu bytes)", n,
		                (unsigned long long)l.total);
	r->nbuffers = n;
	r->nbuckets = l.nbuckets;
	r->desc_off = l.desc_off;
	r->bucket_off = l.bucket_off;
	r->entry_off = l.entry_off;
	r->page_off = buf_page_offset(r, &l);
	r->io_method = o->io_method;
	for (int i = 0; i < BUF_PARTITIONS; i++)
		rw_init(&r->partition[i]);
	for (int i = 0; i < BUF_EXT_LOCKS; i++)
		rw_init(&r->ext_lock[i]);
	buf_map(r);
	for (uint32_t i = 0; i < n; i++) {
		buf_desc *d = &buf_l.desc[i];
		d->rel = 0;
		d->blk = WR_INVALID_BLKNO;
		rw_init(&d->content);
	}
	buf_table_init();
	return WALRUS_OK;
}

int buf_direct_io_init(const wr_options *o, const char *datadir)
{
	bool use;
	int rc = smgr_direct_probe(datadir, o->data_direct_io, o->mmap_reads, &use);
	if (rc == WALRUS_OK)
		buf_l.r->data_direct = use;
	return rc;
}

/* ---------------------------------------------------------------- versions */

/*
 * Only one process writes a buffer's version at a time: the exclusive
 * content lock's holder, or the retagger (sole pin, header lock: nobody
 * else can hold the content lock).  The release fence after the odd store
 * keeps it ahead of the page stores that follow, for a reader whose acquire
 * fence then sees the version moved (buf_peek_page).
 */
static void buf_version_open(buf_desc *d)
{
	uint32_t v = atomic_load_explicit(&d->version, memory_order_relaxed);
	atomic_store_explicit(&d->version, v + 1, memory_order_relaxed);
	atomic_thread_fence(memory_order_release);
}

static void buf_version_close(buf_desc *d)
{
	uint32_t v = atomic_load_explicit(&d->version, memory_order_relaxed);
	atomic_store_explicit(&d->version, v + 1, memory_order_release);
}

/* Hint entries: twice the pool, rounded up to a power of two, at most this
 * many (12 bytes each, per process). */
#define BUF_HINTS_MAX (1u << 16)

static buf_backend buf_default;
WR_TLS buf_backend *buf_me = &buf_default;
static _Atomic uint32_t buf_next_stripe;

static void buf_backend_release(buf_backend *b)
{
	buf_stream_ring_free(&b->stream);
	free(b->pins);
	free(b->locked);
	free(b->hints);
	b->pins = NULL;
	b->locked = NULL;
	b->hints = NULL;
	b->hint_mask = 0;
}

static int buf_backend_init(buf_backend *b)
{
	const buf_region *r = buf_l.r;
	b->pins = calloc(r->nbuffers, sizeof(int32_t));
	b->locked = calloc(r->nbuffers, sizeof(uint8_t));
	uint32_t nhints = 1024;
	while (nhints < BUF_HINTS_MAX && nhints / 2 < r->nbuffers)
		nhints <<= 1;
	b->hints = calloc(nhints, sizeof(buf_hint));
	b->hint_mask = nhints - 1;
	b->hit_stripe =
	    (uint32_t)(getpid() + atomic_fetch_add(&buf_next_stripe, 1)) % BUF_HIT_STRIPES;
	if (b->pins == NULL || b->locked == NULL || b->hints == NULL) {
		buf_backend_release(b);
		return wr_error(WALRUS_ENOMEM, "out of memory for %u private pin counts",
		                r->nbuffers);
	}
	return WALRUS_OK;
}

int buf_attach(void)
{
	buf_region *r = shm_lookup("buffers", NULL);
	if (r == NULL)
		return wr_error(WALRUS_EINTERNAL, "shared memory has no \"buffers\" region");
	/* A forked child inherits its parent's private counts, which name the
	 * parent's pins, not its own: start from zero. */
	buf_backend_release(&buf_default);
	buf_map(r);
	smgr_set_direct(r->data_direct);
	buf_prefault_attach();
	return buf_backend_init(&buf_default);
}

buf_backend *buf_backend_new(void)
{
	if (buf_l.r == NULL) {
		wr_error(WALRUS_EINTERNAL, "buf_backend_new before buf_attach");
		return NULL;
	}
	buf_backend *b = calloc(1, sizeof(*b));
	if (b == NULL) {
		wr_error(WALRUS_ENOMEM, "out of memory for a backend of the buffer pool");
		return NULL;
	}
	if (buf_backend_init(b) != WALRUS_OK) {
		free(b);
		return NULL;
	}
	return b;
}

void buf_backend_set(buf_backend *b)
{
	buf_me = b != NULL ? b : &buf_default;
}

/* After a fork or a crash: the pins name another process's or instance's buffers. */
void buf_backend_forget(buf_backend *b)
{
	if (b == NULL || b == &buf_default)
		return;
	if (buf_me == b)
		buf_me = &buf_default;
	buf_backend_release(b);
	free(b);
}

int buf_backend_close(buf_backend *b)
{
	if (b == NULL)
		return WALRUS_OK;
	buf_backend *saved = buf_me;
	buf_me = b;
	int rc = buf_detach_check();
	buf_me = saved == b ? &buf_default : saved;
	if (b != &buf_default)
		free(b);
	return rc;
}

int buf_detach_check(void)
{
	buf_backend *b = buf_me;
	if (b->pins == NULL)
		return WALRUS_OK;
	/* A stream left open: its reads must land before its pins go. */
	buf_stream_drain();
	int leaked = 0, first = 0;
	for (uint32_t i = 0; i < buf_l.r->nbuffers; i++) {
		int buf = (int)i + 1;
		if (b->locked[i] != 0) {
			if (b->locked[i] == BUF_LOCK_EXCL)
				buf_version_close(buf_get_desc(buf));
			rw_unlock(&buf_get_desc(buf)->content);
			b->locked[i] = 0;
		}
		if (b->pins[i] > 0) {
			leaked += b->pins[i];
			first = first ? first : buf;
			b->pins[i] = 1;
			buf_unpin(buf);
		}
	}
	int rc = WALRUS_OK;
	if (leaked > 0) {
		const buf_desc *d = buf_get_desc(first);
		rc = wr_error(WALRUS_EINTERNAL,
		              "buffer pin leak at detach: %d pin(s) still held, first buffer %d "
		              "(relation %u block %u)",
		              leaked, first, d->rel, d->blk);
	}
	buf_backend_release(b);
	return rc;
}

/* ---------------------------------------------------------------- I/O state */

static void buf_wait_io(buf_desc *d)
{
	uint64_t t0 = 0;
	for (;;) {
		/* Read the sequence before the flag: a wake between the two
		 * changes the sequence, so the futex wait returns at once. */
		uint32_t seq = atomic_load(&d->io_seq);
		uint32_t s = buf_hdr_lock(d);
		buf_hdr_unlock(d, s & BM_IO_IN_PROGRESS ? s | BM_IO_WAITER : s);
		if (!(s & BM_IO_IN_PROGRESS))
			break;
		/* The I/O may be one of our own streams' reads, or its owner may
		 * be waiting for one of them: complete ours before sleeping. */
		if (t0 == 0 && buf_stream_inflight() > 0) {
			buf_stream_drain();
			continue;
		}
		t0 = t0 ? t0 : wr_now_ns();
		/* The process doing the I/O may have died: then nobody ends it. */
		if (atomic_load(&shm_hdr()->state) == SHM_STATE_CRASHED)
			wr_panic("instance crashed while waiting for I/O on buffer %d",
			         (int)(d - buf_l.desc) + 1);
		(void)ipc_wait_u32(&d->io_seq, seq, BUF_IO_WAIT_NS); /* re-checked above */
	}
	if (t0)
		atomic_fetch_add(&buf_l.r->stats.io_wait_ns, wr_now_ns() - t0);
}

int buf_try_start_io(buf_desc *d, bool for_input, bool wait)
{
	for (;;) {
		uint32_t s = buf_hdr_lock(d);
		if (!(s & BM_IO_IN_PROGRESS)) {
			bool done = for_input ? (s & BM_VALID) : !(s & BM_DIRTY);
			buf_hdr_unlock(d, done ? s : s | BM_IO_IN_PROGRESS);
			return done ? BUF_IO_DONE : BUF_IO_MINE;
		}
		buf_hdr_unlock(d, s);
		if (!wait)
			return BUF_IO_BUSY;
		buf_wait_io(d);
	}
}

bool buf_start_io(buf_desc *d, bool for_input)
{
	return buf_try_start_io(d, for_input, true) == BUF_IO_MINE;
}

/*
 * Wakes the waiters only if one said it would sleep (BM_IO_WAITER, set
 * under the header lock while the I/O was in progress): most reads have
 * none, and a futex wake is a system call per pool miss, 14% of a
 * larger-than-memory readrandom's time.  A waiter reads io_seq before it
 * sets the flag, so the bump below makes its futex wait return at once if
 * the wake came first.
 */
void buf_end_io(buf_desc *d, uint32_t clear, uint32_t set)
{
	uint32_t s = buf_hdr_lock(d);
	bool waiters = s & BM_IO_WAITER;
	s = (s & ~(clear | BM_IO_IN_PROGRESS | BM_IO_WAITER)) | set;
	buf_hdr_unlock(d, s);
	atomic_fetch_add(&d->io_seq, 1);
	if (waiters) {
		ipc_wake_all(&d->io_seq);
		atomic_fetch_add_explicit(&buf_l.r->stats.io_wakeups, 1, memory_order_relaxed);
	}
}

char *buf_page_ptr(int buf)
{
	return buf_l.pages + (size_t)(buf - 1) * WR_PAGE_SIZE;
}

/*
 * smgr_write stamps the checksum into the page it writes; a private copy
 * keeps that off the shared page other processes are reading.  Not inlined,
 * so that the copy is not on the stack during buf_write_page's WAL flush.
 */
__attribute__((noinline)) static int write_copy(smgr_rel *r, wr_blkno blk, const char *page)
{
	_Alignas(4096) char copy[WR_PAGE_SIZE];
	memcpy(copy, page, WR_PAGE_SIZE);
	return smgr_write(r, blk, copy);
}

/*
 * Writes a pinned buffer whose content lock this process holds (either
 * mode: nobody can change the page meanwhile, so its LSN read here is the
 * one of the copy written after the flush).  No-op if it is clean.
 */
int buf_write_page(int buf, _Atomic uint64_t *counter, bool *written)
{
	buf_desc *d = buf_get_desc(buf);
	if (written)
		*written = false;
	if (!buf_start_io(d, false))
		return WALRUS_OK;
	wr_lsn lsn = page_get_lsn(buf_page_ptr(buf));
	if (lsn != 0 && lsn > wal_flushed_lsn())
		wal_flush_to(lsn); /* WAL before data */
	buf_notify_write(d->rel, d->blk, lsn);
	smgr_rel *r;
	int rc = smgr_open(d->rel, &r);
	if (rc == WALRUS_OK)
		rc = write_copy(r, d->blk, buf_page_ptr(buf));
	if (rc != WALRUS_OK) {
		buf_end_io(d, 0, BM_IO_ERROR); /* still dirty: a later write retries */
		return rc;
	}
	buf_end_io(d, BM_DIRTY | BM_CHECKPOINT_NEEDED | BM_IO_ERROR, 0);
	atomic_fetch_add(counter, 1);
	if (written)
		*written = true;
	return WALRUS_OK;
}

/* ---------------------------------------------------------------- lookup and replacement */

static void buf_lock_partitions(wr_rwlock *a, wr_rwlock *b)
{
	if (b == NULL || a == b) {
		rw_lock_excl(a);
		return;
	}
	/* Lower address (= lower partition index) first: no deadlock. */
	rw_lock_excl(a < b ? a : b);
	rw_lock_excl(a < b ? b : a);
}

static void buf_unlock_partitions(wr_rwlock *a, wr_rwlock *b)
{
	rw_unlock(a);
	if (b != NULL && b != a)
		rw_unlock(b);
}

/* A dirty victim: written by us, the process that needs the slot.  Returns
 * WALRUS_EBUSY (no message) when its content lock is taken: pick another. */
static int buf_clean_victim(int victim)
{
	buf_desc *d = buf_get_desc(victim);
	/* Only try: a caller may hold content locks on other buffers, and the
	 * victim's locker may be waiting for one of them. */
	if (!rw_trylock_shared(&d->content))
		return WALRUS_EBUSY;
	int rc = buf_write_page(victim, &buf_l.r->stats.backend_writes, NULL);
	rw_unlock(&d->content);
	return rc;
}

static _Atomic uint32_t *buf_tag_seq(uint32_t hash)
{
	return &buf_l.r->tag_seq[hash & (BUF_TAG_SEQS - 1)];
}

/* Under the partition lock of @hash, held exclusive. */
static void buf_tag_changed(uint32_t hash)
{
	atomic_fetch_add(buf_tag_seq(hash), 1);
}

/* One buffer of @rel untagged (true), or left as it is: tagged otherwise
 * (true), or pinned / in I/O now (false: try again). */
static bool drop_one(int buf, wr_relid rel)
{
	buf_desc *d = buf_get_desc(buf);
	uint32_t s = buf_hdr_lock(d);
	wr_blkno blk = d->blk;
	bool mine = (s & BM_TAG_VALID) && d->rel == rel;
	buf_hdr_unlock(d, s);
	if (!mine)
		return true;
	uint32_t hash = buf_tag_hash(rel, blk);
	wr_rwlock *p = buf_partition_lock(hash);
	rw_lock_excl(p);
	s = buf_hdr_lock(d);
	if (!(s & BM_TAG_VALID) || d->rel != rel || d->blk != blk) {
		buf_hdr_unlock(d, s);
		rw_unlock(p);
		return true;
	}
	if (BUF_REFCOUNT(s) != 0 || (s & BM_IO_IN_PROGRESS)) {
		buf_hdr_unlock(d, s);
		rw_unlock(p);
		return false;
	}
	buf_table_delete(hash, buf);
	buf_tag_changed(hash);
	buf_version_open(d);
	s &= ~(BM_TAG_VALID | BM_VALID | BM_DIRTY | BM_IO_ERROR | BM_CHECKPOINT_NEEDED |
	       BM_CHECKED | BUF_USAGE_MASK);
	buf_hdr_unlock(d, s);
	buf_version_close(d);
	rw_unlock(p);
	return true;
}

void buf_drop_rel(wr_relid rel)
{
	uint32_t n = buf_nbuffers();
	for (uint32_t b = 1; b <= n; b++) {
		const buf_desc *d = buf_get_desc((int)b);
		if (d->rel != rel) /* a racy look: a buffer retagged to @rel is not possible now */
			continue;
		/* A pin now is a write in progress (checkpointer, bgwriter, an
		 * eviction) or a reader finishing a step: short. */
		for (int tries = 0; !drop_one((int)b, rel); tries++)
			if (tries > 100)
				wr_sleep_us(100);
			else
				sched_yield();
	}
}

bool buf_absent(wr_relid rel, wr_blkno blk, uint32_t *ticket)
{
	uint32_t hash = buf_tag_hash(rel, blk);
	wr_rwlock *part = buf_partition_lock(hash);
	rw_lock_shared(part);
	bool absent = buf_table_lookup(hash, rel, blk) == 0;
	*ticket = atomic_load_explicit(buf_tag_seq(hash), memory_order_relaxed);
	rw_unlock(part);
	return absent;
}

bool buf_absent_still(wr_relid rel, wr_blkno blk, uint32_t ticket)
{
	/* The caller's reads of the page come before this load. */
	atomic_thread_fence(memory_order_acquire);
	return atomic_load_explicit(buf_tag_seq(buf_tag_hash(rel, blk)), memory_order_relaxed) ==
	       ticket;
}

/*
 * Gives @victim (pinned by us, clean) the tag (rel, blk).  Returns the
 * buffer now mapped to the tag, pinned: @victim, or another process's
 * buffer that got there first (then the victim is unpinned, and *valid
 * says whether that one was valid when pinned); 0 when the victim was
 * pinned or dirtied meanwhile (unpinned: sweep again).
 */
static int buf_retag(int victim, uint32_t state, wr_relid rel, wr_blkno blk, uint32_t hash,
                     bool *valid)
{
	buf_desc *d = buf_get_desc(victim);
	bool had_tag = state & BM_TAG_VALID;
	uint32_t ohash = had_tag ? buf_tag_hash(d->rel, d->blk) : 0;
	wr_rwlock *newp = buf_partition_lock(hash);
	wr_rwlock *oldp = had_tag ? buf_partition_lock(ohash) : NULL;
	buf_lock_partitions(newp, oldp);
	int existing = buf_table_lookup(hash, rel, blk);
	if (existing != 0) {
		*valid = buf_pin(existing); /* under the partition lock: cannot be retagged */
		buf_unlock_partitions(newp, oldp);
		buf_unpin(victim);
		return existing;
	}
	uint32_t s = buf_hdr_lock(d);
	if (BUF_REFCOUNT(s) != 1 || (s & BM_DIRTY)) {
		buf_hdr_unlock(d, s);
		buf_unlock_partitions(newp, oldp);
		buf_unpin(victim);
		return 0;
	}
	bool evicted = s & BM_VALID;
	if (had_tag) {
		buf_table_delete(ohash, victim);
		buf_tag_changed(ohash);
	}
	/* Odd across the change of tag, and even again only once BM_VALID is
	 * seen clear: a peek that sees the new even version sees the buffer
	 * invalid until its read has filled the page. */
	buf_version_open(d);
	d->rel = rel;
	d->blk = blk;
	s &= ~(BM_VALID | BM_DIRTY | BM_IO_ERROR | BM_CHECKPOINT_NEEDED | BM_CHECKED |
	       BUF_USAGE_MASK);
	buf_hdr_unlock(d, s | BM_TAG_VALID | BUF_USAGE_ONE);
	buf_version_close(d);
	buf_table_insert(hash, victim, rel, blk);
	buf_tag_changed(hash);
	buf_unlock_partitions(newp, oldp);
	if (evicted)
		atomic_fetch_add(&buf_l.r->stats.evictions, 1);
	return victim;
}

/*
 * The hit path without the mapping table: pins the buffer where this process
 * last found (rel, blk) and checks its tag.  A buffer is retagged only by a
 * process holding its sole pin, under its header lock (buf_retag), and a pin
 * is taken only while the header lock is free: so once pinned here, the tag
 * read is the buffer's and stays so until the pin goes.  A stale hint costs
 * a pin and an unpin of some other buffer (its usage count goes up once), and
 * makes a concurrent retag of that buffer sweep on: both harmless.  Returns
 * the buffer pinned, or 0 (nothing pinned).
 */
/*
 * The hints are sets of BUF_HINT_WAYS, newest first.  Direct-mapped, two
 * leaves sharing a slot (one in ten of a large tree's) kept taking it from
 * each other, and every such visit went through the mapping table.
 */
#define BUF_HINT_WAYS 4u

static buf_hint *buf_hint_set_of(uint32_t hash)
{
	return &buf_me->hints[hash & buf_me->hint_mask & ~(BUF_HINT_WAYS - 1)];
}

static int buf_hint_find(wr_relid rel, wr_blkno blk, uint32_t hash)
{
	const buf_hint *set = buf_hint_set_of(hash);
	for (uint32_t i = 0; i < BUF_HINT_WAYS; i++)
		if (set[i].rel == rel && set[i].blk == blk)
			return set[i].buf;
	return 0;
}

static int buf_hint_pin(wr_relid rel, wr_blkno blk, uint32_t hash, bool *valid)
{
	int buf = buf_hint_find(rel, blk, hash);
	if (buf == 0)
		return 0;
	/* Start loading the page's header and its last line (the special space
	 * of most page types) while the pin waits for the descriptor: a reader
	 * touches both first, and on a large pool neither is likely cached. */
	const char *page = buf_page_ptr(buf);
	__builtin_prefetch(page);
	__builtin_prefetch(page + WR_PAGE_SIZE - 64);
	bool v = buf_pin(buf);
	const buf_desc *d = buf_get_desc(buf);
	if ((atomic_load(&d->state) & BM_TAG_VALID) && d->rel == rel && d->blk == blk) {
		*valid = v;
		return buf;
	}
	buf_unpin(buf);
	return 0;
}

static void buf_hint_set(wr_relid rel, wr_blkno blk, uint32_t hash, int buf)
{
	buf_hint *set = buf_hint_set_of(hash);
	uint32_t i = 0;
	while (i < BUF_HINT_WAYS - 1 && (set[i].rel != rel || set[i].blk != blk))
		i++;
	/* The entry's own way, or the oldest: the ones before it move down one. */
	memmove(&set[1], &set[0], i * sizeof(*set));
	set[0] = (buf_hint){.rel = rel, .blk = blk, .buf = buf};
}

int buf_get(wr_relid rel, wr_blkno blk, int *out, bool *valid)
{
	bool v = false;
	uint32_t hash = buf_tag_hash(rel, blk);
	int buf = buf_hint_pin(rel, blk, hash, &v);
	if (buf != 0) {
		if (valid != NULL)
			*valid = v;
		*out = buf;
		return WALRUS_OK;
	}
	wr_rwlock *part = buf_partition_lock(hash);
	rw_lock_shared(part);
	buf = buf_table_lookup(hash, rel, blk);
	if (buf != 0)
		v = buf_pin(buf); /* before the lock goes: it cannot be retagged */
	rw_unlock(part);
	while (buf == 0) {
		int victim;
		uint32_t state;
		int rc = buf_clock_victim(&victim, &state);
		if (rc != WALRUS_OK)
			return rc;
		if (state & BM_DIRTY) {
			rc = buf_clean_victim(victim);
			if (rc != WALRUS_OK) {
				buf_unpin(victim);
				if (rc == WALRUS_EBUSY)
					continue;
				return rc;
			}
		}
		buf = buf_retag(victim, state, rel, blk, hash, &v);
	}
	buf_hint_set(rel, blk, hash, buf);
	/* Valid when pinned stays valid while pinned: only a retag clears it. */
	if (valid != NULL)
		*valid = v;
	*out = buf;
	return WALRUS_OK;
}

static WR_TLS buf_my_reads my_reads;

buf_my_reads buf_my_read_counts(void)
{
	return my_reads;
}

int buf_load(int buf)
{
	buf_desc *d = buf_get_desc(buf);
	if (!buf_start_io(d, true)) {
		atomic_fetch_add(&buf_l.r->stats.hits, 1);
		return WALRUS_OK;
	}
	smgr_rel *r;
	uint64_t t0 = wr_now_ns();
	int rc = smgr_open(d->rel, &r); /* pinned: the tag cannot change */
	if (rc == WALRUS_OK)
		rc = smgr_read(r, d->blk, buf_page_ptr(buf));
	my_reads.n++;
	my_reads.ns += wr_now_ns() - t0;
	if (rc != WALRUS_OK) {
		/* Left mapped but invalid: the next reader tries the I/O again. */
		buf_end_io(d, 0, BM_IO_ERROR);
		buf_unpin(buf);
		return rc;
	}
	buf_end_io(d, BM_IO_ERROR, BM_VALID);
	atomic_fetch_add(&buf_l.r->stats.reads, 1);
	return WALRUS_OK;
}

int buf_read(wr_relid rel, wr_blkno blk, int *out)
{
	int buf;
	bool valid;
	*out = BUF_INVALID;
	int rc = buf_get(rel, blk, &buf, &valid);
	if (rc == WALRUS_OK && valid) {
		/* A hit seen by the pin itself: no header lock needed. */
		atomic_fetch_add_explicit(&buf_l.r->hits[buf_me->hit_stripe].n, 1,
		                          memory_order_relaxed);
		*out = buf;
		return WALRUS_OK;
	}
	if (rc == WALRUS_OK)
		rc = buf_load(buf);
	if (rc == WALRUS_OK)
		*out = buf;
	return rc;
}

int buf_read_zero(wr_relid rel, wr_blkno blk, int *out)
{
	int buf;
	*out = BUF_INVALID;
	int rc = buf_get(rel, blk, &buf, NULL);
	if (rc != WALRUS_OK)
		return rc;
	buf_desc *d = buf_get_desc(buf);
	if (buf_start_io(d, true)) {
		buf_prefault_new(buf);
		memset(buf_page_ptr(buf), 0, WR_PAGE_SIZE);
		buf_end_io(d, BM_IO_ERROR, BM_VALID);
	}
	buf_lock(buf, true);
	*out = buf;
	return WALRUS_OK;
}

/* Writes a new page_init'ed block at the end of @r under the extension lock. */
static int buf_extend_file(smgr_rel *r, wr_relid rel, wr_blkno *blk)
{
	_Alignas(4096) char page[WR_PAGE_SIZE];
	wr_rwlock *ext = &buf_l.r->ext_lock[rel % BUF_EXT_LOCKS];
	/* Two extenders must not pick the same block number. */
	rw_lock_excl(ext);
	int rc = smgr_nblocks(r, blk);
	if (rc == WALRUS_OK) {
		page_init(page, 0, 0);
		rc = smgr_extend(r, *blk, page);
	}
	rw_unlock(ext);
	return rc;
}

int buf_extend(wr_relid rel, int *out, wr_blkno *blk)
{
	smgr_rel *r;
	int buf;
	*out = BUF_INVALID;
	int rc = smgr_open(rel, &r);
	if (rc == WALRUS_OK)
		rc = buf_extend_file(r, rel, blk);
	if (rc == WALRUS_OK)
		rc = buf_get(rel, *blk, &buf, NULL);
	if (rc != WALRUS_OK)
		return rc;
	buf_desc *d = buf_get_desc(buf);
	/* The block is on disk already; a reader may have raced us to it,
	 * then its read (or ours here) fills the same content. */
	if (buf_start_io(d, true)) {
		page_init(buf_page_ptr(buf), 0, 0);
		buf_end_io(d, BM_IO_ERROR, BM_VALID);
	}
	atomic_fetch_add(&buf_l.r->stats.extends, 1);
	buf_lock(buf, true);
	*out = buf;
	return WALRUS_OK;
}

/* ---------------------------------------------------------------- pins and content locks */

static void buf_check_pinned(const buf_backend *me, int buf, const char *what)
{
	if (buf < 1 || me->pins == NULL || (uint32_t)buf > buf_l.r->nbuffers ||
	    me->pins[buf - 1] <= 0)
		wr_panic("%s of buffer %d, which this process has not pinned", what, buf);
}

void buf_release(int buf)
{
	buf_check_pinned(buf_me, buf, "release");
	if (buf_me->pins[buf - 1] == 1 && buf_me->locked[buf - 1] != 0)
		wr_panic("buffer %d released while its content lock is held", buf);
	buf_unpin(buf);
}

void buf_lock(int buf, bool exclusive)
{
	buf_backend *me = buf_me;
	buf_check_pinned(me, buf, "content lock");
	if (me->locked[buf - 1] != 0)
		wr_panic("buffer %d content-locked twice by one process", buf);
	wr_rwlock *l = &buf_get_desc(buf)->content;
	if (!(exclusive ? rw_trylock_excl(l) : rw_trylock_shared(l))) {
		/* The holder may be waiting for one of our streams' reads. */
		if (buf_stream_inflight() > 0)
			buf_stream_drain();
		uint64_t t0 = wr_now_ns();
		if (exclusive)
			rw_lock_excl(l);
		else
			rw_lock_shared(l);
		atomic_fetch_add(&buf_l.r->stats.content_wait_ns, wr_now_ns() - t0);
	}
	if (exclusive)
		buf_version_open(buf_get_desc(buf));
	me->locked[buf - 1] = exclusive ? BUF_LOCK_EXCL : BUF_LOCK_SHARED;
}

void buf_unlock(int buf)
{
	buf_backend *me = buf_me;
	buf_check_pinned(me, buf, "content unlock");
	if (me->locked[buf - 1] == 0)
		wr_panic("buffer %d unlocked but not content-locked by this process", buf);
	if (me->locked[buf - 1] == BUF_LOCK_EXCL)
		buf_version_close(buf_get_desc(buf));
	me->locked[buf - 1] = 0;
	rw_unlock(&buf_get_desc(buf)->content);
}

void *buf_page(int buf)
{
	buf_check_pinned(buf_me, buf, "page access");
	return buf_page_ptr(buf);
}

void buf_mark_dirty(int buf)
{
	buf_check_pinned(buf_me, buf, "mark dirty");
	if (buf_me->locked[buf - 1] != BUF_LOCK_EXCL)
		wr_panic("buffer %d marked dirty without its exclusive content lock", buf);
	buf_desc *d = buf_get_desc(buf);
	uint32_t s = buf_hdr_lock(d);
	if (!(s & BM_VALID)) {
		buf_hdr_unlock(d, s);
		wr_panic("buffer %d marked dirty but not valid", buf);
	}
	buf_hdr_unlock(d, s | BM_DIRTY);
}

bool buf_checked(int buf)
{
	buf_check_pinned(buf_me, buf, "checked");
	return atomic_load(&buf_get_desc(buf)->state) & BM_CHECKED;
}

static void set_checked(int buf, bool on)
{
	buf_check_pinned(buf_me, buf, "set checked");
	buf_desc *d = buf_get_desc(buf);
	uint32_t s = buf_hdr_lock(d);
	buf_hdr_unlock(d, on ? s | BM_CHECKED : s & ~BM_CHECKED);
}

void buf_set_checked(int buf)
{
	set_checked(buf, true);
}

void buf_clear_checked(int buf)
{
	set_checked(buf, false);
}

void buf_tag(int buf, wr_relid *rel, wr_blkno *blk)
{
	buf_check_pinned(buf_me, buf, "tag");
	const buf_desc *d = buf_get_desc(buf);
	*rel = d->rel;
	*blk = d->blk;
}

/* ---------------------------------------------------------------- optimistic reads */

/*
 * The only reads of shared pages without a pin or a content lock.  They
 * race with a writer by design, and that is sound: @fn's result is used
 * only if the version was even before and unchanged after (acquire load,
 * then @fn, then an acquire fence and the second load), so no exclusive
 * holder and no retag overlapped it, and BM_VALID seen after the first load
 * means the page's read from disk had finished.  A torn read can only give
 * a wrong answer that the second load rejects; the callers' page accessors
 * clamp every offset to the page, so it never reads outside it.  The tag
 * fields are plain, written by the retagger with the version odd: read here
 * racily too.
 */
__attribute__((no_sanitize("thread"))) static int buf_peek_page(buf_desc *d, int buf, wr_relid rel,
                                                                wr_blkno blk, buf_peek_fn fn,
                                                                void *arg, uint32_t *state)
{
	uint32_t v = atomic_load_explicit(&d->version, memory_order_acquire);
	if (v & 1)
		return BUF_PEEK_CHANGED;
	uint32_t s = atomic_load_explicit(&d->state, memory_order_acquire);
	uint32_t want = BM_VALID | BM_TAG_VALID;
	/* A held header lock is left to the locked path, which waits for it
	 * (and notices a holder that died: ipc_spin_delay). */
	if ((s & (want | BM_LOCKED)) != want || d->rel != rel || d->blk != blk)
		return BUF_PEEK_NONE;
	WR_RACY_READS_BEGIN();
	fn(buf_page_ptr(buf), arg);
	WR_RACY_READS_END();
	atomic_thread_fence(memory_order_acquire);
	if (atomic_load_explicit(&d->version, memory_order_relaxed) != v)
		return BUF_PEEK_CHANGED;
	*state = s;
	return BUF_PEEK_DONE;
}

/*
 * A pin counts a use of the buffer for the clock sweep; a peek must too, or
 * pages read only by peeks would be the first evicted.  Once at the maximum
 * (where a pool that holds everything keeps them) this writes nothing.
 */
static void buf_peek_use(buf_desc *d, uint32_t s)
{
	if (BUF_USAGE(s) >= BUF_MAX_USAGE || (s & BM_LOCKED))
		return;
	/* One try: a lost bump is a use not counted, nothing more. */
	(void)atomic_compare_exchange_strong(&d->state, &s, s + BUF_USAGE_ONE);
}

static int buf_peek_buf(int buf, wr_relid rel, wr_blkno blk, buf_peek_fn fn, void *arg)
{
	/* The page's header, line pointers and special space start loading
	 * while the descriptor's line does: each is a miss on a large pool. */
	const char *page = buf_page_ptr(buf);
	__builtin_prefetch(page);
	__builtin_prefetch(page + 64);
	__builtin_prefetch(page + 128);
	__builtin_prefetch(page + WR_PAGE_SIZE - 64);
	buf_desc *d = buf_get_desc(buf);
	uint32_t s = 0;
	int rc = buf_peek_page(d, buf, rel, blk, fn, arg, &s);
	if (rc == BUF_PEEK_DONE)
		buf_peek_use(d, s);
	return rc;
}

int buf_peek(wr_relid rel, wr_blkno blk, buf_peek_fn fn, void *arg)
{
	int32_t none = 0;
	return buf_peek_at(rel, blk, &none, fn, arg);
}

int buf_peek_at(wr_relid rel, wr_blkno blk, int32_t *guess, buf_peek_fn fn, void *arg)
{
	int buf = *guess;
	if (buf > 0 && (uint32_t)buf <= buf_l.r->nbuffers) {
		int rc = buf_peek_buf(buf, rel, blk, fn, arg);
		if (rc != BUF_PEEK_NONE)
			return rc;
	}
	buf = buf_hint_find(rel, blk, buf_tag_hash(rel, blk));
	if (buf == 0 || buf == *guess)
		return BUF_PEEK_NONE;
	int rc = buf_peek_buf(buf, rel, blk, fn, arg);
	if (rc == BUF_PEEK_DONE)
		*guess = buf;
	return rc;
}

/* ---------------------------------------------------------------- flush, stats, hooks */

/* Pins @buf if it is valid and dirty (header lock: its tag cannot change). */
static bool buf_pin_if_dirty(int buf)
{
	buf_desc *d = buf_get_desc(buf);
	uint32_t want = BM_VALID | BM_DIRTY;
	if ((atomic_load(&d->state) & want) != want)
		return false;
	uint32_t s = buf_hdr_lock(d);
	bool dirty = (s & want) == want;
	if (dirty)
		buf_pin_locked(buf, &s);
	buf_hdr_unlock(d, s);
	return dirty;
}

int buf_flush_all(void)
{
	int first_rc = WALRUS_OK;
	for (uint32_t i = 0; i < buf_l.r->nbuffers; i++) {
		int buf = (int)i + 1;
		if (!buf_pin_if_dirty(buf))
			continue;
		/* If this process holds the content lock already, write under it. */
		bool take = buf_me->locked[i] == 0;
		if (take)
			buf_lock(buf, false);
		int rc = buf_write_page(buf, &buf_l.r->stats.flush_writes, NULL);
		if (take)
			buf_unlock(buf);
		buf_unpin(buf);
		if (rc != WALRUS_OK && first_rc == WALRUS_OK)
			first_rc = rc;
	}
	return first_rc;
}

void buf_get_stats(buf_stats *s)
{
	const buf_shared_stats *st = &buf_l.r->stats;
	s->hits = atomic_load(&st->hits);
	for (int i = 0; i < BUF_HIT_STRIPES; i++)
		s->hits += atomic_load(&buf_l.r->hits[i].n);
	s->reads = atomic_load(&st->reads);
	s->data_direct = buf_l.r->data_direct;
	s->extends = atomic_load(&st->extends);
	s->backend_writes = atomic_load(&st->backend_writes);
	s->flush_writes = atomic_load(&st->flush_writes);
	s->evictions = atomic_load(&st->evictions);
	s->ckpt_writes = atomic_load(&st->ckpt_writes);
	s->bgwriter_writes = atomic_load(&st->bgwriter_writes);
	s->bgwriter_stops = atomic_load(&st->bgwriter_stops);
	s->allocs = atomic_load(&st->allocs);
	s->writebacks = atomic_load(&st->writebacks);
	s->content_wait_ns = atomic_load(&st->content_wait_ns);
	s->io_wait_ns = atomic_load(&st->io_wait_ns);
	s->io_wakeups = atomic_load(&st->io_wakeups);
	s->nbuffers = buf_l.r->nbuffers;
}

/* A racy count (no locks): good for progress lines and monitors, not for decisions. */
uint32_t buf_count_dirty(void)
{
	uint32_t n = buf_l.r->nbuffers, dirty = 0;
	for (uint32_t i = 0; i < n; i++)
		dirty += (atomic_load_explicit(&buf_l.desc[i].state, memory_order_relaxed) &
		          BM_DIRTY) != 0;
	return dirty;
}

void buf_notify_write(wr_relid rel, wr_blkno blk, wr_lsn lsn)
{
	if (buf_observer)
		buf_observer(rel, blk, lsn);
}

void buf_set_write_observer(buf_write_observer fn)
{
	buf_observer = fn;
}
