/*
 * test_stream.c - read streams (stream.c) with both io_methods: every block
 * in order through a pool smaller than the relation, concurrent readers of
 * the same blocks doing each read once, checksum failures and injected read
 * errors reported for their block with nothing left pinned, streams closed
 * half-way, a process reading a block its own stream has in flight, streams
 * of the caller's blocks (a callback, a list: its order, its errors per
 * block, no pin left on any path, the depth cap, a forked child closing its
 * copy), and the storage functions the stream is built on (smgr_check_read reports what
 * smgr_read reports; smgr_prefetch is only a hint).
 *
 * As tests/buffer/test_buffer.c: no instance, a shared memory segment made
 * by tu_shm_wal_buffers_setup and inherited by forked children, which
 * report failures by exit code.  Each io_uring case runs as a loop test
 * over io_method and data_direct_io (0 = sync, 1 = io_uring, 2 and 3 the
 * same with data files O_DIRECT).
 */
#include "testutil.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "buffer/buf_int.h"
#include "fdcache/fdcache.h"
#include "testsupport/testsupport.h"
#include "wal/wal.h"

#define NSLOTS 16
#define REL    7
#define STAMP  WR_PAGE_HEADER_SIZE /* where a page keeps its own block number */

typedef struct test_shared {
	_Atomic uint32_t arrived;
} test_shared;

static wr_options opts;
static const char *datadir;
static test_shared *tsh;
static wr_relid rel_now = REL; /* the relation make_relation and scan work on */

static const char *method_name(int m)
{
	return m == WR_IO_URING ? "io_uring" : "sync";
}

/* A loop test's variant: the io_method, and whether data files are O_DIRECT. */
#define METHOD(v) ((v) % 2)
#define DIRECT(v) ((v) / 2)
#define VARIANTS  4

static void setup(int64_t nbuffers, int variant)
{
	int io_method = METHOD(variant);
	wr_opts_defaults(&opts);
	ck_assert_int_eq(wr_opts_set(&opts, "wal_segment_size", "1MB"), WALRUS_OK);
	ck_assert_int_eq(wr_opts_set(&opts, "wal_buffers", "256kB"), WALRUS_OK);
	/* 32 blocks per segment: streams cross segment files. */
	char seg[32];
	snprintf(seg, sizeof(seg), "%dkB", 32 * WR_PAGE_SIZE / 1024);
	ck_assert_int_eq(wr_opts_set(&opts, "data_segment_size", seg), WALRUS_OK);
	ck_assert_int_eq(wr_opts_set(&opts, "io_method", method_name(io_method)), WALRUS_OK);
	opts.shared_buffers = nbuffers * WR_PAGE_SIZE;
	datadir = tu_tmpdir("walrus-stream");
	tsh = tu_shm_wal_buffers_setup(&opts, datadir, NSLOTS, true, sizeof(test_shared));
	ck_assert_int_eq(wal_attach(0), WALRUS_OK);
	if (DIRECT(variant)) {
		ck_assert_int_eq(wr_opts_set(&opts, "data_direct_io", "auto"), WALRUS_OK);
		ck_assert_int_eq(buf_direct_io_init(&opts, datadir), WALRUS_OK);
		if (!buf_l.r->data_direct)
			fprintf(stderr, "O_DIRECT refused under %s: buffered\n", datadir);
	}
	ck_assert_int_eq(buf_attach(), WALRUS_OK);
	ck_assert_int_eq(smgr_create(REL), WALRUS_OK);
}

static uint8_t body_byte(wr_blkno b, size_t i)
{
	return (uint8_t)(b * 7 + i * 13 + 1);
}

static void make_page(char *page, wr_blkno b)
{
	page_init(page, 0, 0);
	memcpy(page + STAMP, &b, sizeof(b));
	for (size_t i = STAMP + sizeof(b); i < WR_PAGE_SIZE; i++)
		page[i] = (char)body_byte(b, i);
}

/* True when @page holds block @b's content. */
static bool page_ok(const char *page, wr_blkno b)
{
	wr_blkno stamp;
	memcpy(&stamp, page + STAMP, sizeof(stamp));
	if (stamp != b)
		return false;
	for (size_t i = STAMP + sizeof(b); i < WR_PAGE_SIZE; i++)
		if ((uint8_t)page[i] != body_byte(b, i))
			return false;
	return true;
}

/* @n blocks written straight through storage: none is in the pool. */
static void make_relation(wr_blkno n)
{
	static _Alignas(4096) char page[WR_PAGE_SIZE];
	smgr_rel *r;
	if (!smgr_exists(rel_now))
		ck_assert_int_eq(smgr_create(rel_now), WALRUS_OK);
	ck_assert_int_eq(smgr_open(rel_now, &r), WALRUS_OK);
	for (wr_blkno b = 0; b < n; b++) {
		make_page(page, b);
		ck_assert_int_eq(smgr_extend(r, b, page), WALRUS_OK);
	}
}

/* Nothing pinned by anyone and no I/O flag left in the pool. */
static void check_pool_idle(void)
{
	for (uint32_t i = 0; i < buf_l.r->nbuffers; i++) {
		uint32_t s = atomic_load(&buf_l.desc[i].state);
		ck_assert_msg(BUF_REFCOUNT(s) == 0, "buffer %u still pinned", i + 1);
		ck_assert_msg(!(s & BM_IO_IN_PROGRESS), "buffer %u: I/O flag left", i + 1);
	}
}

/* Reads [from, to) through a stream; returns 0 or a code naming what went wrong. */
static int scan(wr_blkno from, wr_blkno to, int depth, buf_stream_stats *st)
{
	buf_stream *s;
	if (buf_stream_open(&s, rel_now, from, to, depth) != WALRUS_OK)
		return 20;
	wr_blkno want = from, blk;
	int buf, rc;
	while ((rc = buf_stream_next(s, &buf, &blk)) == WALRUS_OK) {
		if (blk != want++)
			return 21;
		buf_lock(buf, false);
		bool ok = page_ok(buf_page(buf), blk);
		buf_unlock(buf);
		buf_release(buf);
		if (!ok)
			return 22;
	}
	if (rc != WALRUS_ENOTFOUND || want != to || buf != BUF_INVALID)
		return 23;
	if (st != NULL)
		buf_stream_get_stats(s, st);
	buf_stream_close(s);
	return 0;
}

START_TEST(every_block_in_order_through_a_small_pool)
{
	enum { NBUF = 32, NBLK = 200 };
	setup(NBUF, _i);
	make_relation(NBLK);
	buf_stats st0, st1;
	buf_stream_stats ss;
	buf_get_stats(&st0);
	ck_assert_int_eq(scan(0, NBLK, 16, &ss), 0);
	buf_get_stats(&st1);
	ck_assert_uint_eq(st1.reads - st0.reads, NBLK); /* the relation does not fit: all read */
	ck_assert_int_eq(ss.io_method, METHOD(_i));
	if (METHOD(_i) == WR_IO_URING) {
		ck_assert_int_eq(ss.depth, NBUF / 4); /* capped: a quarter of the pool */
		ck_assert_uint_eq(ss.blocks, NBLK);
		/* Adjacent blocks combined, at most a segment's (32 blocks) or a half depth. */
		ck_assert_uint_lt(ss.submitted, NBLK / 2);
		ck_assert_uint_gt(ss.max_inflight, 1);
	} else {
		ck_assert_int_eq(ss.depth, 16);
		ck_assert_uint_eq(ss.submitted, 0); /* one sequential run: the kernel's readahead */
	}
	/* A part of it, twice: the second pass finds the blocks in the pool. */
	ck_assert_int_eq(scan(50, 70, 4, NULL), 0);
	buf_get_stats(&st0);
	ck_assert_int_eq(scan(50, 70, 4, &ss), 0);
	buf_get_stats(&st1);
	ck_assert_uint_eq(st1.reads, st0.reads);
	ck_assert_uint_eq(st1.hits - st0.hits, 20);
	/* Empty range; a range past the end is an error per block, not a hang. */
	ck_assert_int_eq(scan(10, 10, 4, NULL), 0);
	buf_stream *s;
	int buf;
	wr_blkno blk;
	ck_assert_int_eq(buf_stream_open(&s, REL, NBLK - 1, NBLK + 2, 4), WALRUS_OK);
	ck_assert_int_eq(buf_stream_next(s, &buf, &blk), WALRUS_OK);
	buf_release(buf);
	ck_assert_int_eq(buf_stream_next(s, &buf, &blk), WALRUS_EIO);
	ck_assert_uint_eq(blk, NBLK);
	ck_assert_int_eq(buf, BUF_INVALID);
	ck_assert_ptr_nonnull(
	    strstr(walrus_errmsg(), "read only 0 of " TU_PAGE_SIZE_STRING " bytes"));
	ck_assert_int_eq(buf_stream_next(s, &buf, &blk), WALRUS_EIO);
	ck_assert_int_eq(buf_stream_next(s, &buf, &blk), WALRUS_ENOTFOUND);
	buf_stream_close(s);
	ck_assert_int_eq(buf_stream_open(&s, REL, 5, 4, 4), WALRUS_EINVAL);
	ck_assert_int_eq(buf_stream_open(&s, REL, 0, 4, 0), WALRUS_EINVAL);
	ck_assert_ptr_null(s);
	check_pool_idle();
	ck_assert_int_eq(buf_detach_check(), WALRUS_OK);
}
END_TEST

/* Loop: _i = 1 with data files O_DIRECT, where advice would read the blocks twice: none. */
START_TEST(sync_stream_advises_runs_after_gaps)
{
	enum { NBUF = 256, NBLK = 200 };
	setup(NBUF, _i ? 2 + WR_IO_SYNC : WR_IO_SYNC);
	make_relation(NBLK);
	/* Every tenth block in the pool: the reads skip them, the kernel sees jumps. */
	for (wr_blkno b = 5; b < NBLK; b += 10) {
		int buf;
		ck_assert_int_eq(buf_read(REL, b, &buf), WALRUS_OK);
		buf_release(buf);
	}
	buf_stats st0, st1;
	buf_stream_stats ss;
	buf_get_stats(&st0);
	ck_assert_int_eq(scan(0, NBLK, 16, &ss), 0);
	buf_get_stats(&st1);
	ck_assert_uint_eq(st1.reads - st0.reads, NBLK - NBLK / 10);
	ck_assert_uint_eq(st1.hits - st0.hits, NBLK / 10);
	/* Runs after a gap are advised, the first one and continuations are not. */
	if (smgr_direct()) {
		ck_assert_uint_eq(ss.submitted, 0);
	} else {
		ck_assert_uint_gt(ss.submitted, NBLK / 2);
		ck_assert_uint_lt(ss.submitted, NBLK - NBLK / 10);
	}
	check_pool_idle();
	ck_assert_int_eq(buf_detach_check(), WALRUS_OK);
}
END_TEST

struct reader_arg {
	int who, nproc;
	bool stream;
	wr_blkno nblocks;
};

static int same_blocks_reader(void *p)
{
	struct reader_arg *a = p;
	if (wal_attach(a->who + 1) != WALRUS_OK || buf_attach() != WALRUS_OK)
		return 10;
	/* Everyone starts at once, to race for the same blocks. */
	atomic_fetch_add(&tsh->arrived, 1);
	while (atomic_load(&tsh->arrived) < (uint32_t)a->nproc)
		sched_yield();
	if (a->stream) {
		int rc = scan(0, a->nblocks, 16, NULL);
		if (rc != 0)
			return rc;
	} else {
		for (wr_blkno b = 0; b < a->nblocks; b++) {
			int buf;
			if (buf_read(rel_now, b, &buf) != WALRUS_OK)
				return 11;
			buf_lock(buf, false);
			bool ok = page_ok(buf_page(buf), b);
			buf_unlock(buf);
			buf_release(buf);
			if (!ok)
				return 12;
		}
	}
	return buf_detach_check() == WALRUS_OK ? 0 : 13;
}

START_TEST(concurrent_readers_read_each_block_once)
{
	/* A pool that holds every round's relation: no block is evicted and read again. */
	enum { NBUF = 1024, NBLK = 200, NPROC = 3 };
	int rounds = tu_long_mode() ? 5 : 3;
	setup(NBUF, _i);
	/* The parent streams first: children inherit its ring and must make their own. */
	rel_now = REL + 100;
	make_relation(8);
	ck_assert_int_eq(scan(0, 8, 4, NULL), 0);
	for (int round = 0; round < rounds; round++) {
		rel_now = REL + (wr_relid)round;
		make_relation(NBLK);
		atomic_store(&tsh->arrived, 0);
		buf_stats st0, st1;
		buf_get_stats(&st0);
		struct reader_arg args[NPROC];
		pid_t pids[NPROC];
		for (int i = 0; i < NPROC; i++) {
			/* Two streams and one plain reader. */
			args[i] = (struct reader_arg){i, NPROC, i < 2, NBLK};
			pids[i] = tu_fork(same_blocks_reader, &args[i]);
		}
		for (int i = 0; i < NPROC; i++)
			ck_assert_int_eq(tu_wait(pids[i]), 0);
		buf_get_stats(&st1);
		ck_assert_uint_eq(st1.reads - st0.reads, NBLK); /* each block read once */
		ck_assert_uint_eq(st1.hits - st0.hits, (uint64_t)(NPROC - 1) * NBLK);
		ck_assert_uint_eq(st1.evictions, 0);
		check_pool_idle();
	}
	ck_assert_int_eq(buf_detach_check(), WALRUS_OK);
}
END_TEST

/* Streams [0, n) expecting @bad to fail with @code and every other block fine. */
static void scan_expect_failure(wr_blkno n, wr_blkno bad, int code, const char *msg)
{
	buf_stream *s;
	int buf, rc;
	wr_blkno blk, want = 0;
	ck_assert_int_eq(buf_stream_open(&s, REL, 0, n, 8), WALRUS_OK);
	while ((rc = buf_stream_next(s, &buf, &blk)) != WALRUS_ENOTFOUND) {
		ck_assert_uint_eq(blk, want++);
		if (blk == bad) {
			ck_assert_int_eq(rc, code);
			ck_assert_int_eq(buf, BUF_INVALID);
			ck_assert_msg(strstr(walrus_errmsg(), msg) != NULL, "message: %s",
			              walrus_errmsg());
			continue;
		}
		ck_assert_msg(rc == WALRUS_OK, "block %u: %s", blk, walrus_errmsg());
		ck_assert(page_ok(buf_page(buf), blk));
		buf_release(buf);
	}
	ck_assert_uint_eq(want, n);
	buf_stream_close(s);
}

START_TEST(flipped_bit_is_corrupt_for_its_block_only)
{
	enum { NBLK = 40, BAD = 17 };
	setup(32, _i);
	make_relation(NBLK);
	char path[4200];
	smgr_segment_path(REL, 0, path, sizeof(path));
	tu_flip_bit(path, (off_t)BAD * WR_PAGE_SIZE + 3000, 5);
	wr_log_set_stderr(WR_PANIC + 1); /* the WARNING of the bad checksum */
	scan_expect_failure(NBLK, BAD, WALRUS_ECORRUPT, "invalid page in block 17 of file");
	ck_assert_ptr_nonnull(strstr(walrus_errmsg(), path));
	check_pool_idle();
	/* The failed read left the block invalid: a plain read tries again. */
	int buf;
	ck_assert_int_eq(buf_read(REL, BAD, &buf), WALRUS_ECORRUPT);
	ck_assert_int_eq(buf_detach_check(), WALRUS_OK);
}
END_TEST

START_TEST(injected_read_error_is_reported_alike)
{
	enum { NBLK = 64 };
	setup(32, _i);
	make_relation(NBLK);
	/* The fourth read of segment 1 (block 35) fails, whichever method reads. */
	ck_assert_int_eq(ts_failpoint_set("pread:EIO:/base/7.1@3*1"), WALRUS_OK);
	scan_expect_failure(NBLK, 35, WALRUS_EIO, "/base/7.1\": Input/output error");
	ck_assert_uint_eq(ts_failpoint_hits(), 1);
	ck_assert_int_eq(ts_failpoint_set(NULL), WALRUS_OK);
	check_pool_idle();
	ck_assert_int_eq(scan(0, NBLK, 8, NULL), 0); /* block 35 is read again */
	ck_assert_int_eq(buf_detach_check(), WALRUS_OK);
}
END_TEST

START_TEST(closing_half_way_leaves_no_pins)
{
	enum { NBLK = 200 };
	setup(32, _i);
	make_relation(NBLK);
	for (int stop = 0; stop < 12; stop += 5) {
		buf_stream *s;
		int buf;
		wr_blkno blk;
		ck_assert_int_eq(buf_stream_open(&s, REL, (wr_blkno)stop * 10, NBLK, 16),
		                 WALRUS_OK);
		for (int i = 0; i < stop; i++) {
			ck_assert_int_eq(buf_stream_next(s, &buf, &blk), WALRUS_OK);
			buf_release(buf);
		}
		buf_stream_close(s); /* reads may be in flight */
		check_pool_idle();
	}
	/* A leaked stream: detach waits for its reads and reports its pins
	 * (a sync stream pins nothing ahead). */
	buf_stream *s;
	ck_assert_int_eq(buf_stream_open(&s, REL, 0, NBLK, 16), WALRUS_OK);
	if (METHOD(_i) == WR_IO_URING) {
		ck_assert_int_eq(buf_detach_check(), WALRUS_EINTERNAL);
		ck_assert_ptr_nonnull(strstr(walrus_errmsg(), "pin leak"));
	} else {
		ck_assert_int_eq(buf_detach_check(), WALRUS_OK);
	}
	check_pool_idle();
	buf_stream_close(s); /* detached: frees its memory only */
}
END_TEST

START_TEST(own_read_in_flight_does_not_block_the_process)
{
	enum { NBLK = 40 };
	setup(32, WR_IO_URING);
	make_relation(NBLK);
	buf_stats st0, st1;
	buf_get_stats(&st0);
	buf_stream *s;
	int buf, mine;
	wr_blkno blk;
	ck_assert_int_eq(buf_stream_open(&s, REL, 0, NBLK, 8), WALRUS_OK);
	/* Block 3's read is in flight (or done and not yet reaped): reading it
	 * here must complete it, not wait for it forever. */
	ck_assert_int_eq(buf_read(REL, 3, &mine), WALRUS_OK);
	ck_assert(page_ok(buf_page(mine), 3));
	for (wr_blkno b = 0; b < NBLK; b++) {
		ck_assert_int_eq(buf_stream_next(s, &buf, &blk), WALRUS_OK);
		ck_assert_uint_eq(blk, b);
		ck_assert(page_ok(buf_page(buf), b));
		buf_release(buf);
	}
	buf_stream_close(s);
	buf_release(mine);
	buf_get_stats(&st1);
	ck_assert_uint_eq(st1.reads - st0.reads, NBLK); /* block 3 once */
	check_pool_idle();
	ck_assert_int_eq(buf_detach_check(), WALRUS_OK);
}
END_TEST

/*
 * B holds block 0's content lock and asks for block 20, whose read A's
 * stream has in flight; then A asks for block 0's lock.  Each waits for the
 * other unless A completes its own reads before it sleeps.
 */
static int lock_holder(void *p)
{
	(void)p;
	int x, y;
	if (wal_attach(1) != WALRUS_OK || buf_attach() != WALRUS_OK)
		return 10;
	if (buf_read(REL, 0, &x) != WALRUS_OK)
		return 11;
	buf_lock(x, true);
	atomic_store(&tsh->arrived, 1);
	while (atomic_load(&tsh->arrived) != 2)
		sched_yield();
	if (buf_read(REL, 20, &y) != WALRUS_OK || !page_ok(buf_page(y), 20))
		return 12;
	buf_release(y);
	buf_unlock(x);
	buf_release(x);
	return buf_detach_check() == WALRUS_OK ? 0 : 13;
}

/* The descriptor of the buffer holding (REL, @blk); fails the test if none does. */
static buf_desc *desc_of(wr_blkno blk)
{
	for (uint32_t i = 0; i < buf_l.r->nbuffers; i++) {
		buf_desc *d = &buf_l.desc[i];
		if ((atomic_load(&d->state) & BM_TAG_VALID) && d->rel == REL && d->blk == blk)
			return d;
	}
	ck_abort_msg("no buffer holds block %u", (unsigned)blk);
	return NULL;
}

START_TEST(waiting_for_a_content_lock_completes_own_reads_first)
{
	enum { NBLK = 40 };
	setup(128, WR_IO_URING);
	make_relation(NBLK);
	pid_t pid = tu_fork(lock_holder, NULL);
	while (atomic_load(&tsh->arrived) != 1)
		sched_yield();
	buf_stream *s;
	int x, buf;
	wr_blkno blk;
	ck_assert_int_eq(buf_stream_open(&s, REL, 20, NBLK, 8), WALRUS_OK);
	ck_assert(atomic_load(&desc_of(20)->state) & BM_IO_IN_PROGRESS); /* our stream's read */
	atomic_store(&tsh->arrived, 2);
	tu_wait_in_syscall(pid, SYS_futex, &desc_of(20)->io_seq); /* B waits for that read */
	ck_assert_int_eq(buf_read(REL, 0, &x), WALRUS_OK);
	buf_lock(x, false);
	buf_unlock(x);
	buf_release(x);
	ck_assert_int_eq(tu_wait(pid), 0);
	while (buf_stream_next(s, &buf, &blk) == WALRUS_OK)
		buf_release(buf);
	buf_stream_close(s);
	check_pool_idle();
	ck_assert_int_eq(buf_detach_check(), WALRUS_OK);
}
END_TEST

START_TEST(smgr_check_read_reports_what_smgr_read_reports)
{
	enum { NBLK = 40 };
	setup(32, WR_IO_SYNC);
	make_relation(NBLK);
	wr_log_set_stderr(WR_PANIC + 1);
	char path[4200];
	smgr_segment_path(REL, 0, path, sizeof(path));
	tu_flip_bit(path, 9 * WR_PAGE_SIZE + 100, 1);
	smgr_rel *r;
	ck_assert_int_eq(smgr_open(REL, &r), WALRUS_OK);
	static _Alignas(4096) char page[WR_PAGE_SIZE];
	char want[4400];
	fdc_file f;
	off_t off;
	/* A bad checksum. */
	ck_assert_int_eq(smgr_read(r, 9, page), WALRUS_ECORRUPT);
	snprintf(want, sizeof(want), "%s", walrus_errmsg());
	ck_assert_int_eq(smgr_block_handle(r, 9, &f, &off), WALRUS_OK);
	ck_assert_int_eq(off, 9 * WR_PAGE_SIZE);
	ck_assert_int_eq(fdc_pread(f, page, WR_PAGE_SIZE, off), WR_PAGE_SIZE);
	ck_assert_int_eq(smgr_check_read(r, 9, page, WR_PAGE_SIZE), WALRUS_ECORRUPT);
	ck_assert_str_eq(walrus_errmsg(), want);
	ck_assert(page_is_new(page)); /* bad data never leaves */
	/* A short read and a failed one. */
	ck_assert_int_eq(smgr_check_read(r, 9, page, 100), WALRUS_EIO);
	ck_assert_ptr_nonnull(
	    strstr(walrus_errmsg(), "read only 100 of " TU_PAGE_SIZE_STRING " bytes"));
	ck_assert_int_eq(smgr_check_read(r, 9, page, -EIO), WALRUS_EIO);
	snprintf(want, sizeof(want), "could not read file \"%s\": Input/output error", path);
	ck_assert_str_eq(walrus_errmsg(), want);
	/* A good page. */
	ck_assert_int_eq(smgr_block_handle(r, 33, &f, &off), WALRUS_OK);
	ck_assert_int_eq(off, 1 * WR_PAGE_SIZE);
	ck_assert_int_eq(fdc_pread(f, page, WR_PAGE_SIZE, off), WR_PAGE_SIZE);
	ck_assert_int_eq(smgr_check_read(r, 33, page, WR_PAGE_SIZE), WALRUS_OK);
	ck_assert(page_ok(page, 33));
	/* A missing segment: the message of smgr_read's short read. */
	ck_assert_int_eq(smgr_read(r, 1000, page), WALRUS_EIO);
	snprintf(want, sizeof(want), "%s", walrus_errmsg());
	ck_assert_int_eq(smgr_block_handle(r, 1000, &f, &off), WALRUS_EIO);
	ck_assert_str_eq(walrus_errmsg(), want);
	/* Prefetch is a hint: past the end is no error. */
	wr_error_clear();
	smgr_prefetch(r, 0, 2000);
	smgr_prefetch(r, 5000, 10);
	ck_assert_str_eq(walrus_errmsg(), "");
}
END_TEST

/* ---------------------------------------------------------------- the caller's blocks */

/* A callback's blocks: blk[0 .. n), none for now at @hold_at while @hold. */
typedef struct feed {
	const wr_blkno *blk;
	int n, i;
	int hold_at;
	bool hold;
} feed;

static wr_blkno feed_next(void *arg)
{
	feed *f = arg;
	if (f->hold && f->i == f->hold_at)
		return WR_INVALID_BLKNO;
	return f->i < f->n ? f->blk[f->i++] : WR_INVALID_BLKNO;
}

/* Buffers pinned by anyone now. */
static uint32_t pinned_now(void)
{
	uint32_t n = 0;
	for (uint32_t i = 0; i < buf_l.r->nbuffers; i++)
		n += BUF_REFCOUNT(atomic_load(&buf_l.desc[i].state)) != 0;
	return n;
}

/*
 * A list in no block order: a run of adjacent blocks (combined into one
 * read by io_uring, advised as one run by sync), blocks scattered over the
 * rest, one named twice in a row, then the start of the relation.
 */
static int mixed_list(wr_blkno *out)
{
	int n = 0;
	for (wr_blkno b = 40; b < 60; b++)
		out[n++] = b;
	for (int i = 0; i < 100; i++)
		out[n++] = 60 + (wr_blkno)(i * 37 % 140); /* distinct, never adjacent */
	out[n] = out[n - 1];
	n++;
	for (wr_blkno b = 0; b < 10; b++)
		out[n++] = b;
	return n;
}

START_TEST(callback_stream_in_the_callers_order)
{
	enum { NBUF = 64, NBLK = 200, DEPTH = 16, HOLD = 30, DISTINCT = 130 };
	setup(NBUF, _i);
	make_relation(NBLK);
	wr_blkno list[160];
	feed f = {.blk = list, .n = mixed_list(list), .hold_at = HOLD, .hold = true};
	bool uring = METHOD(_i) == WR_IO_URING;
	buf_stats st0, st1;
	buf_get_stats(&st0);
	buf_stream *s;
	ck_assert_int_eq(buf_stream_open_cb(&s, REL, feed_next, &f, DEPTH), WALRUS_OK);
	int buf, rc, got = 0;
	wr_blkno blk;
	while ((rc = buf_stream_next(s, &buf, &blk)) != WALRUS_ENOTFOUND || f.hold) {
		if (rc == WALRUS_ENOTFOUND) {
			/* The callback has nothing for now: nothing more until it has. */
			ck_assert_int_eq(got, HOLD);
			ck_assert_int_eq(buf, BUF_INVALID);
			ck_assert_int_eq(buf_stream_next(s, &buf, &blk), WALRUS_ENOTFOUND);
			f.hold = false;
			continue;
		}
		ck_assert_msg(rc == WALRUS_OK, "block %u: %s", blk, walrus_errmsg());
		ck_assert_uint_eq(blk, list[got]);
		got++;
		/* The look-ahead pins at most the depth, besides the block in hand. */
		ck_assert_uint_le(pinned_now(), uring ? DEPTH + 1 : 1);
		buf_lock(buf, false);
		ck_assert(page_ok(buf_page(buf), blk));
		buf_unlock(buf);
		buf_release(buf);
	}
	ck_assert_int_eq(got, f.n);
	buf_stream_stats ss;
	buf_stream_get_stats(s, &ss);
	buf_stream_close(s);
	buf_get_stats(&st1);
	ck_assert_uint_eq(st1.reads - st0.reads, DISTINCT); /* the repeat was pinned still */
	ck_assert_int_eq(ss.depth, DEPTH);
	if (uring) {
		ck_assert_uint_ge(ss.blocks, DISTINCT - 1); /* but perhaps the repeat's block */
		ck_assert_uint_lt(ss.submitted, ss.blocks); /* the run was combined */
	} else if (smgr_direct()) {
		ck_assert_uint_eq(ss.submitted, 0);
	} else {
		/* Every scattered block advised, and the run's first 16 in one call. */
		ck_assert_uint_ge(ss.submitted, 100 + 16);
		ck_assert_uint_lt(ss.submitted, DISTINCT);
	}
	check_pool_idle();
	/* A list, and an empty one. */
	ck_assert_int_eq(buf_stream_open_list(&s, REL, list, 5, 2), WALRUS_OK);
	for (int i = 0; i < 5; i++) {
		ck_assert_int_eq(buf_stream_next(s, &buf, &blk), WALRUS_OK);
		ck_assert_uint_eq(blk, list[i]);
		buf_release(buf);
	}
	ck_assert_int_eq(buf_stream_next(s, &buf, &blk), WALRUS_ENOTFOUND);
	buf_stream_close(s);
	ck_assert_int_eq(buf_stream_open_list(&s, REL, NULL, 0, 4), WALRUS_OK);
	ck_assert_int_eq(buf_stream_next(s, &buf, &blk), WALRUS_ENOTFOUND);
	buf_stream_close(s);
	ck_assert_int_eq(buf_stream_open_cb(&s, REL, NULL, NULL, 4), WALRUS_EINVAL);
	ck_assert_int_eq(buf_stream_open_cb(&s, REL, feed_next, &f, 0), WALRUS_EINVAL);
	ck_assert_int_eq(buf_stream_open_list(&s, REL, NULL, 3, 4), WALRUS_EINVAL);
	ck_assert_ptr_null(s);
	check_pool_idle();
	ck_assert_int_eq(buf_detach_check(), WALRUS_OK);
}
END_TEST

START_TEST(callback_stream_errors_per_block)
{
	enum { NBLK = 64 };
	setup(32, _i);
	make_relation(NBLK);
	char path[4200];
	smgr_segment_path(REL, 0, path, sizeof(path));
	tu_flip_bit(path, (off_t)17 * WR_PAGE_SIZE + 3000, 5);
	wr_log_set_stderr(WR_PANIC + 1); /* the WARNING of the bad checksum */
	/* The first read of segment 1 (block 35, read with 36 by io_uring) fails. */
	ck_assert_int_eq(ts_failpoint_set("pread:EIO:/base/7.1@0*1"), WALRUS_OK);
	const wr_blkno list[] = {30, 17, 5, NBLK + 5, 35, 36, 2, 17};
	const int want[] = {WALRUS_OK,  WALRUS_ECORRUPT, WALRUS_OK, WALRUS_EIO,
	                    WALRUS_EIO, WALRUS_OK,       WALRUS_OK, WALRUS_ECORRUPT};
	const char *msg[] = {NULL,
	                     "invalid page in block 17 of file",
	                     NULL,
	                     "read only 0 of " TU_PAGE_SIZE_STRING " bytes",
	                     "/base/7.1\": Input/output error",
	                     NULL,
	                     NULL,
	                     "invalid page in block 17 of file"};
	int n = (int)(sizeof(list) / sizeof(list[0]));
	buf_stream *s;
	int buf, rc, i = 0;
	wr_blkno blk;
	ck_assert_int_eq(buf_stream_open_list(&s, REL, list, (uint32_t)n, 8), WALRUS_OK);
	while ((rc = buf_stream_next(s, &buf, &blk)) != WALRUS_ENOTFOUND) {
		ck_assert_int_lt(i, n);
		ck_assert_uint_eq(blk, list[i]);
		ck_assert_msg(rc == want[i], "block %u: %d %s", blk, rc, walrus_errmsg());
		if (rc != WALRUS_OK) {
			ck_assert_int_eq(buf, BUF_INVALID);
			ck_assert_msg(strstr(walrus_errmsg(), msg[i]) != NULL, "block %u: %s", blk,
			              walrus_errmsg());
		} else {
			ck_assert(page_ok(buf_page(buf), blk));
			buf_release(buf);
		}
		i++;
	}
	ck_assert_int_eq(i, n);
	ck_assert_uint_eq(ts_failpoint_hits(), 1);
	ck_assert_int_eq(ts_failpoint_set(NULL), WALRUS_OK);
	buf_stream_close(s);
	check_pool_idle();
	/* Each failed block was left invalid: a plain read tries it again. */
	ck_assert_int_eq(buf_read(REL, 17, &buf), WALRUS_ECORRUPT);
	ck_assert_int_eq(buf_read(REL, 35, &buf), WALRUS_OK);
	ck_assert(page_ok(buf_page(buf), 35));
	buf_release(buf);
	ck_assert_int_eq(buf_detach_check(), WALRUS_OK);
}
END_TEST

/* The forked child's end of callback_stream_leaves_no_pins: closes its copy only. */
static int close_inherited(void *p)
{
	buf_stream_close(p);
	return 0;
}

START_TEST(callback_stream_leaves_no_pins)
{
	enum { NBUF = 32, NBLK = 200 };
	setup(NBUF, _i);
	make_relation(NBLK);
	wr_blkno list[160];
	int n = mixed_list(list);
	bool uring = METHOD(_i) == WR_IO_URING;
	buf_stream *s;
	int buf;
	wr_blkno blk;
	/* Closed at once (reads in flight), after a few blocks, after waiting,
	 * while the callback holds back, and after a failed block. */
	for (int stop = 0; stop < 12; stop += 3) {
		feed f = {.blk = list, .n = n, .hold_at = 20, .hold = stop == 9};
		ck_assert_int_eq(buf_stream_open_cb(&s, REL, feed_next, &f, 12), WALRUS_OK);
		for (int i = 0; i < stop; i++) {
			ck_assert_int_eq(buf_stream_next(s, &buf, &blk), WALRUS_OK);
			buf_release(buf);
		}
		if (stop == 6)
			buf_stream_wait(s);
		buf_stream_close(s);
		check_pool_idle();
	}
	const wr_blkno bad[] = {NBLK + 1, 3, 4, 5};
	ck_assert_int_eq(buf_stream_open_list(&s, REL, bad, 4, 4), WALRUS_OK);
	ck_assert_int_eq(buf_stream_next(s, &buf, &blk), WALRUS_EIO);
	buf_stream_close(s);
	check_pool_idle();
	/* The depth is capped: a quarter of the pool pinned ahead with io_uring,
	 * nothing with sync. */
	feed f = {.blk = list, .n = n, .hold_at = -1};
	ck_assert_int_eq(buf_stream_open_cb(&s, REL, feed_next, &f, 1000), WALRUS_OK);
	buf_stream_wait(s);
	buf_stream_stats ss;
	buf_stream_get_stats(s, &ss);
	ck_assert_int_eq(ss.depth, uring ? NBUF / 4 : BUF_STREAM_MAX_DEPTH);
	ck_assert_uint_eq(pinned_now(), uring ? NBUF / 4 : 0);
	/* A forked child may only close its copy: the parent's pins and reads
	 * stay the parent's, and its stream goes on. */
	ck_assert_int_eq(tu_wait(tu_fork(close_inherited, s)), 0);
	ck_assert_uint_eq(pinned_now(), uring ? NBUF / 4 : 0);
	for (int i = 0; i < n; i++) {
		ck_assert_int_eq(buf_stream_next(s, &buf, &blk), WALRUS_OK);
		ck_assert_uint_eq(blk, list[i]);
		ck_assert(page_ok(buf_page(buf), blk));
		buf_release(buf);
	}
	ck_assert_int_eq(buf_stream_next(s, &buf, &blk), WALRUS_ENOTFOUND);
	buf_stream_close(s);
	check_pool_idle();
	ck_assert_int_eq(buf_detach_check(), WALRUS_OK);
}
END_TEST

static Suite *stream_suite(void)
{
	Suite *s = suite_create("buffer-stream");
	TCase *t = tcase_create("stream");
	tcase_set_timeout(t, 60);
	tcase_add_loop_test(t, every_block_in_order_through_a_small_pool, 0, VARIANTS);
	tcase_add_loop_test(t, concurrent_readers_read_each_block_once, 0, VARIANTS);
	tcase_add_loop_test(t, flipped_bit_is_corrupt_for_its_block_only, 0, VARIANTS);
	tcase_add_loop_test(t, injected_read_error_is_reported_alike, 0, VARIANTS);
	tcase_add_loop_test(t, closing_half_way_leaves_no_pins, 0, VARIANTS);
	tcase_add_loop_test(t, sync_stream_advises_runs_after_gaps, 0, 2);
	tcase_add_loop_test(t, callback_stream_in_the_callers_order, 0, VARIANTS);
	tcase_add_loop_test(t, callback_stream_errors_per_block, 0, VARIANTS);
	tcase_add_loop_test(t, callback_stream_leaves_no_pins, 0, VARIANTS);
	tcase_add_test(t, own_read_in_flight_does_not_block_the_process);
	tcase_add_test(t, waiting_for_a_content_lock_completes_own_reads_first);
	tcase_add_test(t, smgr_check_read_reports_what_smgr_read_reports);
	suite_add_tcase(s, t);
	return s;
}

int main(void)
{
	return tu_run(stream_suite());
}
