/*
 * test_buffer.c - the shared buffer pool: concurrent updates from several
 * processes, eviction through a small pool, WAL before data, checksum
 * failures, pin leaks, one I/O for concurrent readers of a missing page,
 * the minimum pool size, new pages mapping their chunk of the pool (and
 * the next chunks through io_uring, without it, in a forked child, and the
 * ring closed when the pool is unmapped), peeks (optimistic reads)
 * against writers and retags, and write-back hints merged per segment.
 *
 * As in tests/wal/test_insert.c, there is no instance: the test creates a
 * shared memory segment with the "wal" and "buffers" regions (and a small
 * test region for barriers) with tu_shm_wal_buffers_setup, and forked
 * children inherit it, as the supervisor's children do.  Children report
 * failures by exit code, since a libcheck assertion in a grandchild would
 * not reach the runner.
 */
#include "testutil.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "buffer/buf_int.h"
#include "fdcache/fdcache.h"
#include "wal/wal.h"

#define NSLOTS 16
#define REL    7
#define CTR    WR_PAGE_HEADER_SIZE       /* where a page keeps its counter */
#define STAMP  (WR_PAGE_HEADER_SIZE + 8) /* where it keeps its own block number */

typedef struct test_shared {
	_Atomic uint32_t arrived;
} test_shared;

static wr_options opts;
static const char *datadir;
static test_shared *tsh;

/* Write observer state (per process). */
static uint64_t obs_writes, obs_violations;
static wr_blkno obs_last_blk = WR_INVALID_BLKNO;

static void observer(wr_relid rel, wr_blkno blk, wr_lsn lsn)
{
	(void)rel;
	obs_writes++;
	obs_last_blk = blk;
	if (lsn > wal_flushed_lsn())
		obs_violations++;
}

/* @direct: data files O_DIRECT in every process that attaches, as buf_direct_io_init decides. */
static void setup_direct(int64_t nbuffers, bool direct)
{
	wr_opts_defaults(&opts);
	ck_assert_int_eq(wr_opts_set(&opts, "wal_segment_size", "1MB"), WALRUS_OK);
	ck_assert_int_eq(wr_opts_set(&opts, "wal_buffers", "256kB"), WALRUS_OK);
	ck_assert_int_eq(wr_opts_set(&opts, "data_segment_size", "256kB"), WALRUS_OK);
	opts.shared_buffers = nbuffers * WR_PAGE_SIZE;
	datadir = tu_tmpdir("walrus-buf");
	tsh = tu_shm_wal_buffers_setup(&opts, datadir, NSLOTS, true, sizeof(test_shared));
	ck_assert_int_eq(wal_attach(0), WALRUS_OK);
	buf_l.r->data_direct = direct;
	ck_assert_int_eq(buf_attach(), WALRUS_OK);
	ck_assert(smgr_direct() == direct);
	ck_assert_int_eq(smgr_create(REL), WALRUS_OK);
	obs_writes = obs_violations = 0;
	buf_set_write_observer(observer);
}

static void setup(int64_t nbuffers)
{
	setup_direct(nbuffers, false);
}

/* In a forked child: its own WAL slot and private pin counts. */
static int child_attach(int slot)
{
	if (wal_attach(slot) != WALRUS_OK || buf_attach() != WALRUS_OK)
		return 10;
	obs_writes = obs_violations = 0;
	return 0;
}

static uint64_t get_u64(const void *page, size_t off)
{
	uint64_t v;
	memcpy(&v, (const char *)page + off, sizeof(v));
	return v;
}

static void put_u64(void *page, size_t off, uint64_t v)
{
	memcpy((char *)page + off, &v, sizeof(v));
}

/* A WAL record for a change, whose end becomes the page LSN. */
static wr_lsn log_change(uint64_t v)
{
	wal_begin();
	wal_register_data(&v, sizeof(v));
	return wal_insert(RM_XLOG, XLOG_NOOP);
}

/* Increments the counter of @blk under the exclusive lock; checks its stamp. */
static int bump(wr_blkno blk)
{
	int buf;
	int rc = buf_read(REL, blk, &buf);
	if (rc != WALRUS_OK)
		return rc;
	buf_lock(buf, true);
	char *page = buf_page(buf);
	bool ok = get_u64(page, STAMP) == blk;
	uint64_t v = get_u64(page, CTR) + 1;
	put_u64(page, CTR, v);
	page_set_lsn(page, log_change(v));
	buf_mark_dirty(buf);
	buf_unlock(buf);
	buf_release(buf);
	return ok ? WALRUS_OK : WALRUS_ECORRUPT;
}

/* Adds @n blocks through the pool, each stamped with its number, counter 0. */
static void make_blocks(wr_blkno n)
{
	for (wr_blkno i = 0; i < n; i++) {
		int buf;
		wr_blkno blk;
		ck_assert_int_eq(buf_extend(REL, &buf, &blk), WALRUS_OK);
		ck_assert_uint_eq(blk, i);
		char *page = buf_page(buf);
		ck_assert(!page_is_new(page));
		put_u64(page, STAMP, blk);
		page_set_lsn(page, log_change(blk));
		buf_mark_dirty(buf);
		buf_unlock(buf);
		buf_release(buf);
	}
}

/* Every block's counter, through the pool and (after a flush) from disk. */
static void check_counters(wr_blkno n, uint64_t expect)
{
	for (wr_blkno b = 0; b < n; b++) {
		int buf;
		ck_assert_int_eq(buf_read(REL, b, &buf), WALRUS_OK);
		buf_lock(buf, false);
		ck_assert_uint_eq(get_u64(buf_page(buf), CTR), expect);
		buf_unlock(buf);
		buf_release(buf);
	}
	ck_assert_int_eq(buf_flush_all(), WALRUS_OK);
	smgr_rel *r;
	static char page[WR_PAGE_SIZE];
	ck_assert_int_eq(smgr_open(REL, &r), WALRUS_OK);
	for (wr_blkno b = 0; b < n; b++) {
		ck_assert_int_eq(smgr_read(r, b, page), WALRUS_OK);
		ck_assert_uint_eq(get_u64(page, STAMP), b);
		ck_assert_uint_eq(get_u64(page, CTR), expect);
	}
}

struct worker {
	int who;
	int iters;
	wr_blkno nblocks;
};

/* Each iteration bumps one block; who and i spread the blocks around. */
static int counter_worker(void *p)
{
	struct worker *w = p;
	int rc = child_attach(w->who + 1);
	if (rc != 0)
		return rc;
	for (int i = 0; i < w->iters; i++) {
		if (bump((wr_blkno)((i * 7 + w->who) % (int)w->nblocks)) != WALRUS_OK)
			return 11;
		/* One worker also writes everything now and then, racing the others. */
		if (w->who == 0 && i % 100 == 99 && buf_flush_all() != WALRUS_OK)
			return 14;
	}
	if (obs_violations != 0)
		return 12;
	return buf_detach_check() == WALRUS_OK ? 0 : 13;
}

static void run_workers(int nproc, int iters, wr_blkno nblocks)
{
	struct worker w[8];
	pid_t pids[8];
	for (int i = 0; i < nproc; i++) {
		w[i] = (struct worker){i, iters, nblocks};
		pids[i] = tu_fork(counter_worker, &w[i]);
	}
	for (int i = 0; i < nproc; i++)
		ck_assert_int_eq(tu_wait(pids[i]), 0);
}

START_TEST(concurrent_counters_sum_exactly)
{
	enum { NPROC = 4, NBLK = 3 };
	int iters = tu_long_mode() ? 60000 : 3000;
	setup(16);
	make_blocks(NBLK);
	run_workers(NPROC, iters, NBLK);
	/* Each worker bumps block (i*7+who)%3, i.e. every block iters/3 times. */
	check_counters(NBLK, (uint64_t)(NPROC * iters / NBLK));
	ck_assert_uint_eq(obs_violations, 0);
	buf_stats st;
	buf_get_stats(&st);
	ck_assert_uint_eq(st.nbuffers, 16);
	ck_assert_uint_ge(st.hits, (uint64_t)(NPROC * iters));
	ck_assert_uint_eq(st.evictions, 0); /* 3 pages in 16 buffers */
	ck_assert_int_eq(buf_detach_check(), WALRUS_OK);
}
END_TEST

/* Loop: _i = 1 with data files O_DIRECT (reads into the pool's pages, writes from copies). */
START_TEST(eviction_through_small_pool)
{
	enum { NPROC = 4, NBLK = 200 };
	int passes = tu_long_mode() ? 50 : 3;
	setup_direct(16, _i);
	make_blocks(NBLK); /* 200 dirty pages through 16 buffers: evictions write them */
	run_workers(NPROC, passes * NBLK, NBLK);
	/* (i*7+who) % 200 over passes*200 iterations visits every block passes times. */
	check_counters(NBLK, (uint64_t)(NPROC * passes));
	buf_stats st;
	buf_get_stats(&st);
	ck_assert_uint_gt(st.evictions, NBLK);
	ck_assert_uint_gt(st.backend_writes, NBLK);
	ck_assert_uint_gt(st.reads, NBLK);
	ck_assert(st.data_direct == _i);
	ck_assert_uint_eq(obs_violations, 0);
	ck_assert_int_eq(buf_detach_check(), WALRUS_OK);
}
END_TEST

/*
 * O_DIRECT reads into the pool's pages, which must be aligned in memory:
 * the region's offset in shared memory is only cache-line aligned, so
 * pages at an aligned offset from the region's start were not (a read
 * failed with EINVAL).  Every pool size, whatever lies before the region.
 * The start's decision (buf_direct_io_init) reaches every process that
 * attaches.
 */
START_TEST(pages_aligned_for_direct_io)
{
	for (int64_t n = 16; n < 24; n++) {
		setup(n);
		for (int b = 1; b <= (int)n; b++)
			ck_assert_msg((uintptr_t)buf_page_ptr(b) % SMGR_DIRECT_ALIGN == 0,
			              "pool of %lld: page %d at %p", (long long)n, b,
			              (void *)buf_page_ptr(b));
		ck_assert(!smgr_direct());
		ck_assert_int_eq(wr_opts_set(&opts, "data_direct_io", "on"), WALRUS_OK);
		int rc = buf_direct_io_init(&opts, datadir);
		ck_assert_msg(rc == WALRUS_OK ||
		                  strstr(walrus_errmsg(), "refuses O_DIRECT") != NULL,
		              "%s", walrus_errmsg());
		ck_assert_int_eq(buf_attach(), WALRUS_OK);
		ck_assert(smgr_direct() == (rc == WALRUS_OK));
		buf_stats st;
		buf_get_stats(&st);
		ck_assert(st.data_direct == (rc == WALRUS_OK));
		ck_assert_int_eq(buf_detach_check(), WALRUS_OK);
		smgr_set_direct(false);
		shm_detach();
	}
}
END_TEST

/* The access method's mark stays with the page while it stays in its
 * buffer, and goes when the buffer takes another page. */
START_TEST(checked_mark_goes_with_the_page)
{
	setup(16);
	make_blocks(120);
	int buf;
	ck_assert_int_eq(buf_read(REL, 0, &buf), WALRUS_OK);
	ck_assert(!buf_checked(buf));
	buf_set_checked(buf);
	ck_assert(buf_checked(buf));
	buf_release(buf);
	ck_assert_int_eq(buf_read(REL, 0, &buf), WALRUS_OK);
	ck_assert(buf_checked(buf)); /* still there: a hit */
	buf_clear_checked(buf);
	ck_assert(!buf_checked(buf));
	buf_set_checked(buf);
	int first = buf;
	buf_release(buf);
	/* Every other block through the 16 buffers: block 0's is taken. */
	for (wr_blkno b = 1; b < 120; b++) {
		ck_assert_int_eq(buf_read(REL, b, &buf), WALRUS_OK);
		if (buf == first)
			ck_assert(!buf_checked(buf)); /* another page in it */
		buf_release(buf);
	}
	ck_assert_int_eq(buf_read(REL, 0, &buf), WALRUS_OK);
	ck_assert(!buf_checked(buf)); /* read anew */
	buf_release(buf);
	ck_assert_int_eq(buf_detach_check(), WALRUS_OK);
}
END_TEST

START_TEST(wal_flushed_before_dirty_victim_is_written)
{
	setup(16);
	make_blocks(120);
	ck_assert_int_eq(buf_flush_all(), WALRUS_OK);
	/* Dirty block 0 with an LSN that is not yet flushed. */
	int buf;
	ck_assert_int_eq(buf_read(REL, 0, &buf), WALRUS_OK);
	buf_lock(buf, true);
	wr_lsn lsn = log_change(42);
	page_set_lsn(buf_page(buf), lsn);
	buf_mark_dirty(buf);
	buf_unlock(buf);
	buf_release(buf);
	ck_assert_uint_lt(wal_flushed_lsn(), lsn);
	uint64_t before = obs_writes;
	buf_stats st0, st;
	buf_get_stats(&st0);
	/* Enough misses to sweep the clock around many times. */
	for (int pass = 0; pass < 3 && obs_writes == before; pass++)
		for (wr_blkno b = 1; b < 40; b++) {
			ck_assert_int_eq(buf_read(REL, b, &buf), WALRUS_OK);
			buf_release(buf);
		}
	ck_assert_uint_eq(obs_writes, before + 1); /* only block 0 was dirty */
	ck_assert_uint_eq(obs_last_blk, 0);
	ck_assert_uint_eq(obs_violations, 0);
	ck_assert_uint_ge(wal_flushed_lsn(), lsn);
	buf_get_stats(&st);
	ck_assert_uint_eq(st.backend_writes, st0.backend_writes + 1);
}
END_TEST

START_TEST(corrupt_page_is_reported_without_leaking_pins)
{
	setup(16);
	make_blocks(40);
	ck_assert_int_eq(buf_flush_all(), WALRUS_OK);
	for (int pass = 0; pass < 3; pass++)
		for (wr_blkno b = 1; b < 40; b++) {
			int buf;
			ck_assert_int_eq(buf_read(REL, b, &buf), WALRUS_OK);
			buf_release(buf);
		}
	char path[4200];
	smgr_segment_path(REL, 0, path, sizeof(path));
	tu_flip_bit(path, 4000, 3);
	buf_stats st0, st1;
	buf_get_stats(&st0);
	int buf = 123;
	ck_assert_int_eq(buf_read(REL, 0, &buf), WALRUS_ECORRUPT);
	ck_assert_int_eq(buf, BUF_INVALID);
	ck_assert_ptr_nonnull(strstr(walrus_errmsg(), "block 0"));
	/* The failed read is retried, not served from the pool. */
	ck_assert_int_eq(buf_read(REL, 0, &buf), WALRUS_ECORRUPT);
	buf_get_stats(&st1);
	ck_assert_uint_eq(st1.reads, st0.reads); /* failed reads are not counted as reads */
	ck_assert_int_eq(buf_read(REL, 1, &buf), WALRUS_OK);
	buf_release(buf);
	ck_assert_int_eq(buf_detach_check(), WALRUS_OK);
	for (uint32_t i = 0; i < 16; i++)
		ck_assert_uint_eq(BUF_REFCOUNT(atomic_load(&buf_l.desc[i].state)), 0);
}
END_TEST

START_TEST(leaked_pin_is_reported_at_detach)
{
	setup(16);
	make_blocks(4);
	ck_assert_int_eq(buf_detach_check(), WALRUS_OK); /* balanced so far */
	ck_assert_int_eq(buf_attach(), WALRUS_OK);
	int a, b, c;
	ck_assert_int_eq(buf_read(REL, 2, &a), WALRUS_OK);
	ck_assert_int_eq(buf_read(REL, 2, &b), WALRUS_OK);
	ck_assert_int_eq(a, b);
	/* Pinned twice by one process: one shared pin, two private. */
	ck_assert_uint_eq(BUF_REFCOUNT(atomic_load(&buf_get_desc(a)->state)), 1);
	buf_release(b);
	ck_assert_int_eq(buf_read(REL, 3, &c), WALRUS_OK);
	buf_lock(c, true);
	ck_assert_int_eq(buf_detach_check(), WALRUS_EINTERNAL);
	ck_assert_ptr_nonnull(strstr(walrus_errmsg(), "pin leak"));
	ck_assert_ptr_nonnull(strstr(walrus_errmsg(), "2 pin(s)"));
	/* The leaked pins and the lock were released. */
	for (uint32_t i = 0; i < 16; i++)
		ck_assert_uint_eq(BUF_REFCOUNT(atomic_load(&buf_l.desc[i].state)), 0);
	ck_assert(rw_trylock_excl(&buf_get_desc(c)->content));
	rw_unlock(&buf_get_desc(c)->content);
	ck_assert_int_eq(buf_detach_check(), WALRUS_OK); /* detached: nothing to check */
}
END_TEST

struct reader_arg {
	int who, nproc;
	wr_blkno nblocks;
};

/* Waits for every reader, then reads each block once and checks its stamp. */
static int same_page_reader(void *p)
{
	struct reader_arg *a = p;
	if (child_attach(a->who + 1) != 0)
		return 10;
	for (wr_blkno b = 0; b < a->nblocks; b++) {
		/* A barrier per block: all readers ask for it at about once. */
		uint32_t target = (uint32_t)(a->nproc * (int)(b + 1));
		atomic_fetch_add(&tsh->arrived, 1);
		while (atomic_load(&tsh->arrived) < target)
			sched_yield();
		int buf;
		if (buf_read(REL, b, &buf) != WALRUS_OK)
			return 11;
		bool ok = get_u64(buf_page(buf), STAMP) == b;
		buf_release(buf);
		if (!ok)
			return 12;
	}
	return buf_detach_check() == WALRUS_OK ? 0 : 13;
}

START_TEST(concurrent_readers_do_one_io)
{
	enum { NPROC = 4, NBLK = 12 };
	setup(16);
	/* Blocks written straight through storage: none is in the pool. */
	smgr_rel *r;
	static char page[WR_PAGE_SIZE];
	ck_assert_int_eq(smgr_open(REL, &r), WALRUS_OK);
	for (wr_blkno b = 0; b < NBLK; b++) {
		page_init(page, 0, 0);
		put_u64(page, STAMP, b);
		ck_assert_int_eq(smgr_extend(r, b, page), WALRUS_OK);
	}
	struct reader_arg args[NPROC];
	pid_t pids[NPROC];
	for (int i = 0; i < NPROC; i++) {
		args[i] = (struct reader_arg){i, NPROC, NBLK};
		pids[i] = tu_fork(same_page_reader, &args[i]);
	}
	for (int i = 0; i < NPROC; i++)
		ck_assert_int_eq(tu_wait(pids[i]), 0);
	buf_stats st;
	buf_get_stats(&st);
	ck_assert_uint_eq(st.reads, NBLK); /* one I/O per block, however many readers */
	ck_assert_uint_eq(st.hits, (NPROC - 1) * NBLK);
	ck_assert_uint_eq(st.evictions, 0);
}
END_TEST

/* Waits (in another process) for the write-out of buffer *arg to end. */
static int io_waiter(void *arg)
{
	if (child_attach(1) != 0)
		return 10;
	/* The I/O in progress is the parent's: this sleeps until it ends, then
	 * finds the page clean (nothing left to write). */
	return buf_start_io(buf_get_desc(*(int *)arg), false) ? 11 : 0;
}

/*
 * The end of an I/O wakes sleepers only when one said it would sleep: reads
 * nobody waits for make no wake-up call (one system call per pool miss),
 * and a waiter that flagged itself is woken.
 */
START_TEST(io_end_wakes_only_waiters)
{
	setup(16);
	smgr_rel *r; /* blocks written straight through storage: none is in the pool */
	static char page[WR_PAGE_SIZE];
	ck_assert_int_eq(smgr_open(REL, &r), WALRUS_OK);
	for (wr_blkno b = 0; b < 12; b++) {
		page_init(page, 0, 0);
		put_u64(page, STAMP, b);
		ck_assert_int_eq(smgr_extend(r, b, page), WALRUS_OK);
	}
	buf_stats st;
	for (wr_blkno b = 0; b < 12; b++) { /* 12 reads, no one waiting */
		int buf;
		ck_assert_int_eq(buf_read(REL, b, &buf), WALRUS_OK);
		buf_release(buf);
	}
	buf_get_stats(&st);
	ck_assert_uint_eq(st.reads, 12);
	ck_assert_uint_eq(st.io_wakeups, 0);
	/* A write-out in progress, and another process waiting for it. */
	int buf;
	ck_assert_int_eq(buf_read(REL, 3, &buf), WALRUS_OK);
	buf_lock(buf, true);
	buf_mark_dirty(buf);
	buf_unlock(buf);
	buf_desc *d = buf_get_desc(buf);
	ck_assert(buf_start_io(d, false));
	pid_t pid = tu_fork(io_waiter, &buf);
	while (!(atomic_load(&d->state) & BM_IO_WAITER))
		sched_yield();
	buf_end_io(d, BM_DIRTY, 0);
	ck_assert_int_eq(tu_wait(pid), 0);
	buf_get_stats(&st);
	ck_assert_uint_eq(st.io_wakeups, 1);
	ck_assert(!(atomic_load(&d->state) & BM_IO_WAITER));
	buf_release(buf);
	ck_assert_int_eq(buf_detach_check(), WALRUS_OK);
}
END_TEST

START_TEST(too_small_pool_is_refused)
{
	wr_opts_defaults(&opts);
	opts.shared_buffers = 15 * WR_PAGE_SIZE;
	ck_assert_uint_gt(buf_shmem_size(&opts), 16 * WR_PAGE_SIZE);
	ck_assert_int_eq(buf_shmem_init(&opts), WALRUS_EINVAL);
	ck_assert_ptr_nonnull(strstr(walrus_errmsg(), "shared_buffers"));
	ck_assert_ptr_nonnull(strstr(walrus_errmsg(), "at least 16 pages"));
	opts.shared_buffers = 0;
	ck_assert_int_eq(buf_shmem_init(&opts), WALRUS_EINVAL);
}
END_TEST

START_TEST(every_buffer_pinned_is_busy)
{
	setup(16);
	make_blocks(17);
	int bufs[16], extra;
	for (wr_blkno b = 0; b < 16; b++)
		ck_assert_int_eq(buf_read(REL, b, &bufs[b]), WALRUS_OK);
	ck_assert_int_eq(buf_read(REL, 16, &extra), WALRUS_EBUSY);
	ck_assert_ptr_nonnull(strstr(walrus_errmsg(), "no unpinned buffers"));
	for (int i = 0; i < 16; i++)
		buf_release(bufs[i]);
	ck_assert_int_eq(buf_read(REL, 16, &extra), WALRUS_OK);
	buf_release(extra);
	ck_assert_int_eq(buf_detach_check(), WALRUS_OK);
}
END_TEST

/* Pages of this process's resident set (/proc/self/statm), shared pool pages included. */
static long resident_pages(void)
{
	FILE *f = fopen("/proc/self/statm", "r");
	ck_assert_ptr_nonnull(f);
	long size = 0, resident = -1;
	ck_assert_int_eq(fscanf(f, "%ld %ld", &size, &resident), 2);
	fclose(f);
	return resident;
}

static void new_page(wr_blkno blk)
{
	int buf;
	ck_assert_int_eq(buf_read_zero(REL, blk, &buf), WALRUS_OK);
	buf_unlock(buf);
	buf_release(buf);
}

/* The first new page of a fresh pool maps its chunk of 64 buffers in at once. */
START_TEST(new_page_maps_its_chunk)
{
	setup(256);
	uint64_t c0 = buf_prefault_chunks();
	long r0 = resident_pages();
	new_page(0);
	long grown = (resident_pages() - r0) * sysconf(_SC_PAGESIZE);
	ck_assert_int_ge(grown, 64L * WR_PAGE_SIZE);
	ck_assert_uint_ge(buf_prefault_chunks() - c0, 1);
	for (wr_blkno b = 1; b < 200; b++) /* buffers 1..200, in clock order: 4 chunks */
		new_page(b);
	ck_assert_uint_eq(buf_prefault_chunks() - c0, 4); /* the whole pool, once */
	ck_assert_int_eq(buf_detach_check(), WALRUS_OK);
}
END_TEST

#ifdef WALRUS_TEST_HOOKS
enum { PF_TEST_AHEAD = 8 }; /* prefault.c's PF_AHEAD */

static long grown_bytes(long r0)
{
	return (resident_pages() - r0) * sysconf(_SC_PAGESIZE);
}

/* ... and the next PF_AHEAD chunks are mapped by a kernel worker behind it,
 * done once buf_prefault_release has waited for them. */
START_TEST(new_page_maps_the_next_chunks_in_the_background)
{
	setup(2048); /* 32 chunks */
	long r0 = resident_pages();
	new_page(0);
	ck_assert_msg(!buf_test_prefault_ring_off(), "io_uring refused the populates");
	ck_assert_uint_eq(buf_prefault_chunks(), 1 + PF_TEST_AHEAD);
	buf_prefault_release();
	ck_assert_int_ge(grown_bytes(r0), (1L + PF_TEST_AHEAD) * 64 * WR_PAGE_SIZE);
	/* The chunk after the last queued one: queued when its page comes. */
	for (wr_blkno b = 1; b < 64 * 2; b++) /* buffers 2..128, into chunk 1: queues 9 */
		new_page(b);
	ck_assert_uint_eq(buf_prefault_chunks(), 2 + PF_TEST_AHEAD);
	buf_prefault_release();
	ck_assert_int_ge(grown_bytes(r0), (2L + PF_TEST_AHEAD) * 64 * WR_PAGE_SIZE);
	ck_assert_int_eq(buf_detach_check(), WALRUS_OK);
}
END_TEST

/* Without io_uring each chunk is mapped in the call that needs it. */
START_TEST(new_page_without_io_uring_maps_its_chunk_in_the_call)
{
	setup(256);
	buf_test_prefault_refuse_ring();
	int fds = tu_count_fds();
	long r0 = resident_pages();
	new_page(0);
	ck_assert_int_ge(grown_bytes(r0), 64L * WR_PAGE_SIZE);
	ck_assert_uint_eq(buf_prefault_chunks(), 1);
	for (wr_blkno b = 1; b < 200; b++)
		new_page(b);
	ck_assert_uint_eq(buf_prefault_chunks(), 4);
	ck_assert_int_eq(tu_count_fds(), fds); /* no ring */
	ck_assert_int_eq(buf_detach_check(), WALRUS_OK);
}
END_TEST

/* The ring is closed, its populates done, when the pool is unmapped. */
START_TEST(unmapping_the_pool_closes_the_populate_ring)
{
	setup(1024);
	int fds = tu_count_fds();
	new_page(0);
	ck_assert(!buf_test_prefault_ring_off());
	ck_assert_int_eq(tu_count_fds(), fds + 1);
	shm_detach();
	ck_assert_int_eq(tu_count_fds(), fds);
}
END_TEST

/* A forked child maps the pool afresh with a ring of its own; the parent's
 * goes on working. */
static int child_new_pages(void *arg)
{
	(void)arg;
	if (child_attach(1) != 0)
		return 10;
	if (buf_prefault_chunks() != 0)
		return 11; /* the parent's count: the parent's page tables */
	long r0 = resident_pages();
	new_page(64 * 20); /* takes the next buffer of the clock: chunk 1 */
	if (buf_test_prefault_ring_off())
		return 12;
	if (buf_prefault_chunks() != 1 + PF_TEST_AHEAD)
		return 13;
	buf_prefault_release();
	if (grown_bytes(r0) < (1L + PF_TEST_AHEAD) * 64 * WR_PAGE_SIZE)
		return 14;
	return buf_detach_check() == WALRUS_OK ? 0 : 15;
}

START_TEST(forked_child_populates_with_its_own_ring)
{
	setup(2048);
	for (wr_blkno b = 0; b < 64; b++) /* the whole of chunk 0 */
		new_page(b);
	ck_assert_int_eq(tu_wait(tu_fork(child_new_pages, NULL)), 0);
	/* Buffers 66..194 (the child took 65): chunks 1 to 3, queueing 9 to 11. */
	for (wr_blkno b = 64; b <= 64 * 3; b++)
		new_page(b);
	ck_assert_uint_eq(buf_prefault_chunks(), 4 + PF_TEST_AHEAD);
	buf_prefault_release();
	ck_assert_int_eq(buf_detach_check(), WALRUS_OK);
}
END_TEST
#endif

/* ---------------------------------------------------------------- peeks */

typedef struct peek_probe {
	uint64_t stamp;      /* what the peek read at STAMP */
	buf_backend *writer; /* set: changes the page while the peek reads it */
	int buf;             /* the writer's pinned buffer */
	int evict;           /* set: this buffer is given another block while the peek reads */
} peek_probe;

static void read_stamp(const char *page, void *arg)
{
	peek_probe *p = arg;
	p->stamp = get_u64(page, STAMP);
	/* Reads other blocks (0 .. 15 over and over) until the sweep took it. */
	const buf_desc *d = p->evict ? buf_get_desc(p->evict) : NULL;
	for (int i = 0; d != NULL && d->blk == (wr_blkno)p->stamp; i++) {
		int buf;
		ck_assert_int_lt(i, 1000);
		ck_assert_int_eq(buf_read(REL, (wr_blkno)i % 16, &buf), WALRUS_OK);
		buf_release(buf);
	}
	if (p->writer == NULL)
		return;
	buf_backend *reader = buf_me;
	buf_backend_set(p->writer);
	buf_lock(p->buf, true);
	put_u64(buf_page(p->buf), CTR, 99);
	buf_unlock(p->buf);
	buf_backend_set(reader);
}

static int peek_stamp(wr_blkno blk, peek_probe *p)
{
	p->stamp = UINT64_MAX;
	return buf_peek(REL, blk, read_stamp, p);
}

START_TEST(peek_reads_without_pin_until_a_writer_locks)
{
	setup(16);
	make_blocks(4);
	buf_backend *me = buf_backend_new(), *other = buf_me;
	ck_assert_ptr_nonnull(me);
	buf_backend_set(me);
	peek_probe p = {0};
	/* Where the block is, this backend has not seen yet. */
	ck_assert_int_eq(peek_stamp(2, &p), BUF_PEEK_NONE);
	int buf, wbuf;
	ck_assert_int_eq(buf_read(REL, 2, &buf), WALRUS_OK);
	buf_release(buf);
	ck_assert_int_eq(peek_stamp(2, &p), BUF_PEEK_DONE);
	ck_assert_uint_eq(p.stamp, 2);
	ck_assert_uint_eq(BUF_REFCOUNT(atomic_load(&buf_get_desc(buf)->state)), 0);
	/* Another backend's share lock does not stop a peek; its exclusive one does. */
	buf_backend_set(other);
	ck_assert_int_eq(buf_read(REL, 2, &wbuf), WALRUS_OK);
	buf_lock(wbuf, false);
	buf_backend_set(me);
	ck_assert_int_eq(peek_stamp(2, &p), BUF_PEEK_DONE);
	buf_backend_set(other);
	buf_unlock(wbuf);
	buf_lock(wbuf, true);
	buf_backend_set(me);
	ck_assert_int_eq(peek_stamp(2, &p), BUF_PEEK_CHANGED);
	buf_backend_set(other);
	buf_unlock(wbuf);
	buf_backend_set(me);
	ck_assert_int_eq(peek_stamp(2, &p), BUF_PEEK_DONE);
	/* A writer that locks, changes and unlocks while the peek reads. */
	p.writer = other;
	p.buf = wbuf;
	ck_assert_int_eq(peek_stamp(2, &p), BUF_PEEK_CHANGED);
	p.writer = NULL;
	ck_assert_int_eq(peek_stamp(2, &p), BUF_PEEK_DONE);
	buf_backend_set(other);
	buf_release(wbuf);
	ck_assert_int_eq(buf_backend_close(me), WALRUS_OK);
	ck_assert_int_eq(buf_detach_check(), WALRUS_OK);
}
END_TEST

/*
 * buf_peek_at: a guess finds a page this backend has no hint for; a stale
 * guess (a buffer holding another block, or no buffer at all) is checked
 * and passed over for the hint, and the guess is then corrected.
 */
START_TEST(peek_at_a_guessed_buffer)
{
	setup(16);
	make_blocks(4);
	int b2, b3;
	ck_assert_int_eq(buf_read(REL, 2, &b2), WALRUS_OK);
	buf_release(b2);
	ck_assert_int_eq(buf_read(REL, 3, &b3), WALRUS_OK);
	buf_release(b3);
	buf_backend *me = buf_backend_new(), *other = buf_me;
	ck_assert_ptr_nonnull(me);
	buf_backend_set(me);
	peek_probe p = {0};
	ck_assert_int_eq(peek_stamp(2, &p), BUF_PEEK_NONE); /* no hint here */
	int32_t guess = b2;
	p.stamp = UINT64_MAX;
	ck_assert_int_eq(buf_peek_at(REL, 2, &guess, read_stamp, &p), BUF_PEEK_DONE);
	ck_assert_uint_eq(p.stamp, 2);
	ck_assert_int_eq(guess, b2);
	/* Stale: block 3's buffer, with no hint for block 2 either. */
	guess = b3;
	ck_assert_int_eq(buf_peek_at(REL, 2, &guess, read_stamp, &p), BUF_PEEK_NONE);
	/* With a hint: the stale guess is passed over and corrected. */
	int buf;
	ck_assert_int_eq(buf_read(REL, 2, &buf), WALRUS_OK);
	buf_release(buf);
	p.stamp = UINT64_MAX;
	ck_assert_int_eq(buf_peek_at(REL, 2, &guess, read_stamp, &p), BUF_PEEK_DONE);
	ck_assert_uint_eq(p.stamp, 2);
	ck_assert_int_eq(guess, b2);
	/* Out of range: ignored. */
	guess = 1 << 30;
	p.stamp = UINT64_MAX;
	ck_assert_int_eq(buf_peek_at(REL, 2, &guess, read_stamp, &p), BUF_PEEK_DONE);
	ck_assert_int_eq(guess, b2);
	buf_backend_set(other);
	ck_assert_int_eq(buf_backend_close(me), WALRUS_OK);
	ck_assert_int_eq(buf_detach_check(), WALRUS_OK);
}
END_TEST

START_TEST(peek_never_reads_a_buffer_given_another_block)
{
	enum { NBLK = 40 };
	setup(16);
	make_blocks(NBLK); /* 40 blocks through 16 buffers: most hints go stale */
	int done = 0, gone = 0;
	for (wr_blkno b = 0; b < NBLK; b++) {
		peek_probe p = {0};
		int rc = peek_stamp(b, &p);
		if (rc == BUF_PEEK_DONE)
			ck_assert_uint_eq(p.stamp, b);
		done += rc == BUF_PEEK_DONE;
		gone += rc == BUF_PEEK_NONE;
	}
	ck_assert_int_gt(done, 0);
	ck_assert_int_ge(gone, NBLK - 16);
	/* Every buffer, the peeked one too, given another block during a peek. */
	int buf;
	ck_assert_int_eq(buf_read(REL, NBLK - 1, &buf), WALRUS_OK);
	buf_release(buf);
	peek_probe p = {.evict = buf};
	ck_assert_int_eq(peek_stamp(NBLK - 1, &p), BUF_PEEK_CHANGED);
	ck_assert_uint_eq(p.stamp, NBLK - 1);
	ck_assert_int_eq(peek_stamp(NBLK - 1, &p), BUF_PEEK_NONE);
	ck_assert_int_eq(buf_detach_check(), WALRUS_OK);
}
END_TEST

START_TEST(peek_finds_blocks_sharing_a_hint_slot)
{
	setup(16);
	/* Three blocks whose tags fall on the same hint entry. */
	wr_blkno same[3];
	int n = 0;
	uint32_t slot = buf_tag_hash(REL, 0) & buf_me->hint_mask;
	for (wr_blkno b = 0; b < 10000000 && n < 3; b++)
		if ((buf_tag_hash(REL, b) & buf_me->hint_mask) == slot)
			same[n++] = b;
	ck_assert_int_eq(n, 3);
	for (int i = 0; i < 3; i++) {
		int buf;
		ck_assert_int_eq(buf_read_zero(REL, same[i], &buf), WALRUS_OK);
		buf_unlock(buf);
		buf_release(buf);
	}
	/* Each is still found where it was put, without the mapping table. */
	for (int i = 0; i < 3; i++) {
		peek_probe p = {0};
		ck_assert_int_eq(peek_stamp(same[i], &p), BUF_PEEK_DONE);
	}
	ck_assert_int_eq(buf_detach_check(), WALRUS_OK);
}
END_TEST

#ifdef WALRUS_TEST_HOOKS
/* A thread holds the prefault lock (a prefault in flight) while another forks. */
static _Atomic int pf_state; /* 1: held; 2: fork returned in the parent */
static pid_t pf_forker;

static void *hold_prefault_lock(void *arg)
{
	(void)arg;
	buf_test_prefault_lock(true);
	atomic_store(&pf_state, 1);
	/* Released once the forker waits for it in fork's prepare handler, or
	 * once fork returned without waiting (no handler: the child got it held). */
	while (atomic_load(&pf_state) != 2 && !tu_in_syscall(pf_forker, SYS_futex, NULL))
		sched_yield();
	buf_test_prefault_lock(false);
	return NULL;
}

static int child_prefault_lock_free(void *arg)
{
	(void)arg;
	return buf_test_prefault_lock_free() ? 0 : 1;
}

START_TEST(fork_beside_a_prefault_leaves_the_lock_free)
{
	pthread_t t;
	pf_forker = (pid_t)syscall(SYS_gettid);
	ck_assert_int_eq(pthread_create(&t, NULL, hold_prefault_lock, NULL), 0);
	while (atomic_load(&pf_state) != 1)
		sched_yield();
	pid_t child = tu_fork(child_prefault_lock_free, NULL);
	atomic_store(&pf_state, 2);
	ck_assert_int_eq(pthread_join(t, NULL), 0);
	ck_assert_msg(tu_wait(child) == 0, "the child inherited the prefault lock held");
}
END_TEST
#endif

/*
 * Write-back hints for pages evicted at random: one sync_file_range per
 * segment file, spanning its hinted blocks, instead of one per run of
 * adjacent blocks (a call per page when pages are scattered).  The hints
 * below fall in two 256 kB segments: 0 and 2 with 8 KiB pages, 0 and 1
 * with 4 KiB.
 */
START_TEST(writeback_hints_one_call_per_segment)
{
	setup(128);
	make_blocks(96);
	ck_assert_int_eq(buf_flush_all(), WALRUS_OK); /* 96 dirty pages in the page cache */
	buf_wb wb;
	ck_assert_int_eq(buf_wb_init(&wb, 64), WALRUS_OK);
	static const wr_blkno scattered[] = {30, 2, 17, 9, 90, 5, 70, 22};
	for (size_t i = 0; i < sizeof(scattered) / sizeof(scattered[0]); i++)
		buf_wb_add(&wb, REL, scattered[i]);
	buf_stats before, after;
	buf_get_stats(&before);
	buf_wb_issue(&wb);
	buf_get_stats(&after);
	ck_assert_uint_eq(after.writebacks - before.writebacks, 2);
	ck_assert_uint_eq(wb.n, 0);
	buf_wb_free(&wb);
	ck_assert_int_eq(buf_detach_check(), WALRUS_OK);
}
END_TEST

static Suite *buffer_suite(void)
{
	Suite *s = suite_create("buffer");
	TCase *t = tcase_create("pool");
	tcase_set_timeout(t, 60);
	tcase_add_test(t, concurrent_counters_sum_exactly);
	tcase_add_loop_test(t, eviction_through_small_pool, 0, 2);
	tcase_add_test(t, pages_aligned_for_direct_io);
	tcase_add_test(t, checked_mark_goes_with_the_page);
	tcase_add_test(t, wal_flushed_before_dirty_victim_is_written);
	tcase_add_test(t, corrupt_page_is_reported_without_leaking_pins);
	tcase_add_test(t, leaked_pin_is_reported_at_detach);
	tcase_add_test(t, concurrent_readers_do_one_io);
	tcase_add_test(t, io_end_wakes_only_waiters);
	tcase_add_test(t, too_small_pool_is_refused);
	tcase_add_test(t, every_buffer_pinned_is_busy);
	tcase_add_test(t, new_page_maps_its_chunk);
	tcase_add_test(t, peek_reads_without_pin_until_a_writer_locks);
	tcase_add_test(t, peek_at_a_guessed_buffer);
	tcase_add_test(t, peek_never_reads_a_buffer_given_another_block);
	tcase_add_test(t, peek_finds_blocks_sharing_a_hint_slot);
	tcase_add_test(t, writeback_hints_one_call_per_segment);
#ifdef WALRUS_TEST_HOOKS
	tcase_add_test(t, fork_beside_a_prefault_leaves_the_lock_free);
	tcase_add_test(t, new_page_maps_the_next_chunks_in_the_background);
	tcase_add_test(t, new_page_without_io_uring_maps_its_chunk_in_the_call);
	tcase_add_test(t, unmapping_the_pool_closes_the_populate_ring);
	tcase_add_test(t, forked_child_populates_with_its_own_ring);
#endif
	suite_add_tcase(s, t);
	return s;
}

int main(void)
{
	return tu_run(buffer_suite());
}
