/*
 * test_smgr.c - relations in segment files: round trips across segment
 * boundaries, checksum failures found on disk, short reads, truncation, and
 * the client side of sync requests (write time and before-close), down to
 * the PANIC of a failed fsync.
 *
 * libcheck forks each case; cases that must PANIC run in a further forked
 * child whose panic handler exits with TU_PANIC_EXIT.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <pthread.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "storage/storage.h"
#include "testsupport/testsupport.h"
#include "testutil.h"

#define SEGSIZE (8 * WR_PAGE_SIZE) /* 8 blocks per segment */

static const char *dir;

static void setup(void)
{
	dir = tu_tmpdir("walrus-smgr");
	wr_log_set_stderr(WR_PANIC + 1);
	ck_assert_int_eq(fdc_init(100), 0);
	ck_assert_int_eq(smgr_init(dir, SEGSIZE), 0);
}

static const char *seg_path(wr_relid rel, uint32_t seg)
{
	static char buf[4][4096];
	static int next;
	char *p = buf[next++ % 4];
	if (seg == 0)
		snprintf(p, 4096, "%s/base/%u", dir, rel);
	else
		snprintf(p, 4096, "%s/base/%u.%u", dir, rel, seg);
	return p;
}

static off_t file_size(const char *path)
{
	struct stat st;
	if (stat(path, &st) != 0)
		return -1;
	return st.st_size;
}

/* A page whose content depends on (rel, block, version). */
static void make_page(unsigned char *p, wr_relid rel, wr_blkno b, int version)
{
	page_init(p, 16, 1);
	page_set_lsn(p, ((uint64_t)rel << 32) | b);
	for (size_t i = WR_PAGE_HEADER_SIZE; i < WR_PAGE_SIZE - 16; i++)
		p[i] = (unsigned char)(rel * 31 + b * 7 + (wr_blkno)version * 13 + i);
}

static void check_page(smgr_rel *r, wr_relid rel, wr_blkno b, int version)
{
	unsigned char want[WR_PAGE_SIZE], got[WR_PAGE_SIZE];
	make_page(want, rel, b, version);
	page_set_checksum(want, b);
	ck_assert_msg(smgr_read(r, b, got) == 0, "read %u: %s", b, walrus_errmsg());
	ck_assert_msg(memcmp(want, got, WR_PAGE_SIZE) == 0, "block %u differs", b);
}

/*
 * Creates @rel with @nblocks blocks (version 0).  Checked with TU_CHILD_CHECK,
 * so that the forked children that must PANIC can use it too: 1 on failure.
 */
static int make_rel(wr_relid rel, wr_blkno nblocks, smgr_rel **r)
{
	TU_CHILD_CHECK(smgr_create(rel) == 0);
	TU_CHILD_CHECK(smgr_open(rel, r) == 0);
	for (wr_blkno b = 0; b < nblocks; b++) {
		unsigned char p[WR_PAGE_SIZE];
		make_page(p, rel, b, 0);
		TU_CHILD_CHECK(smgr_extend(*r, b, p) == 0);
	}
	return 0;
}

static smgr_rel *new_rel(wr_relid rel, wr_blkno nblocks)
{
	smgr_rel *r;
	ck_assert_msg(make_rel(rel, nblocks, &r) == 0, "relation %u: %s", rel, walrus_errmsg());
	return r;
}

/* ---------------------------------------------------------------- sync hook doubles */

#define MAX_REQS 256
static smgr_sync_req reqs[MAX_REQS];
static int req_fds[MAX_REQS];
static int nreqs;
static int hook_refuse;
static uint64_t cur_cycle;
static wr_relid forgot_rel[16];
static uint32_t forgot_seg[16];
static int nforgot;

/* Keeps a duplicate of the fd, as the checkpointer would receive it. */
static int record_sync(const smgr_sync_req *req, int fd)
{
	struct stat st;
	ck_assert_int_eq(fstat(fd, &st), 0);
	if (hook_refuse)
		return WALRUS_EBUSY;
	ck_assert_int_lt(nreqs, MAX_REQS);
	reqs[nreqs] = *req;
	req_fds[nreqs] = dup(fd);
	ck_assert_int_ge(req_fds[nreqs], 0);
	nreqs++;
	return 0;
}

static void record_forget(wr_relid rel, uint32_t from_seg)
{
	ck_assert_int_lt(nforgot, 16);
	forgot_rel[nforgot] = rel;
	forgot_seg[nforgot] = from_seg;
	nforgot++;
}

static uint64_t get_cycle(void)
{
	return cur_cycle;
}

/* ---------------------------------------------------------------- create, exists */

START_TEST(test_create_exists)
{
	ck_assert(!smgr_exists(1));
	ck_assert_int_eq(smgr_create(1), 0);
	ck_assert(smgr_exists(1));
	ck_assert_int_eq(file_size(seg_path(1, 0)), 0);
	ck_assert_int_eq(smgr_create(1), WALRUS_EINVAL);
	ck_assert_ptr_nonnull(strstr(walrus_errmsg(), "already exists"));
	ck_assert_ptr_nonnull(strstr(walrus_errmsg(), seg_path(1, 0)));
	/* Another process (a fresh cache) sees the file. */
	smgr_shutdown();
	ck_assert_int_eq(smgr_init(dir, SEGSIZE), 0);
	ck_assert_int_eq(smgr_create(1), WALRUS_EINVAL);
	ck_assert_ptr_nonnull(strstr(walrus_errmsg(), "already exists"));
	ck_assert(smgr_exists(1));
	smgr_rel *r;
	wr_blkno n;
	ck_assert_int_eq(smgr_open(2, &r), 0);
	ck_assert_int_eq(smgr_nblocks(r, &n), WALRUS_ENOENT);
	char buf[4096];
	smgr_segment_path(3, 0, buf, sizeof(buf));
	ck_assert_str_eq(buf, seg_path(3, 0));
	smgr_segment_path(3, 2, buf, sizeof(buf));
	ck_assert_str_eq(buf + strlen(dir), "/base/3.2");
	ck_assert_uint_eq(smgr_blocks_per_segment(), 8);
}
END_TEST

START_TEST(test_init_checks)
{
	ck_assert_int_eq(smgr_init(dir, 1000), WALRUS_EINVAL);
	ck_assert_int_eq(smgr_init(dir, 0), WALRUS_EINVAL);
	smgr_shutdown();
	smgr_rel *r;
	ck_assert_int_eq(smgr_open(1, &r), WALRUS_EINVAL); /* not initialised */
	const char *fresh = tu_tmpdir("walrus-smgr-fresh");
	ck_assert_int_eq(smgr_init(fresh, SEGSIZE), 0);
	struct stat st;
	char base[4096];
	snprintf(base, sizeof(base), "%s/base", fresh);
	ck_assert_int_eq(stat(base, &st), 0);
	ck_assert(S_ISDIR(st.st_mode));
	ck_assert_uint_eq(st.st_mode & 0777, 0700);
	ck_assert_int_eq(smgr_init(fresh, SEGSIZE), 0); /* exists: fine */
}
END_TEST

/* ---------------------------------------------------------------- block I/O */

/* One call allocates a run of zero blocks across segment boundaries, writing none. */
START_TEST(test_grow_crosses_segments)
{
	smgr_rel *r;
	ck_assert_int_eq(smgr_create(6), 0);
	ck_assert_int_eq(smgr_open(6, &r), 0);
	unsigned char p[WR_PAGE_SIZE];
	make_page(p, 6, 0, 0);
	ck_assert_int_eq(smgr_extend(r, 0, p), 0);
	ck_assert_int_eq(smgr_grow(r, 1, 18), 0); /* blocks 1..18: segments 0, 1 and 2 */
	wr_blkno n;
	ck_assert_int_eq(smgr_nblocks(r, &n), 0);
	ck_assert_uint_eq(n, 19);
	ck_assert_int_eq(file_size(seg_path(6, 0)), SEGSIZE);
	ck_assert_int_eq(file_size(seg_path(6, 1)), SEGSIZE);
	ck_assert_int_eq(file_size(seg_path(6, 2)), (off_t)3 * WR_PAGE_SIZE);
	check_page(r, 6, 0, 0); /* untouched */
	for (wr_blkno b = 1; b < 19; b++) {
		unsigned char got[WR_PAGE_SIZE];
		ck_assert_int_eq(smgr_read(r, b, got), 0);
		ck_assert(page_is_new(got));
	}
	/* A grown block is written like any other. */
	make_page(p, 6, 12, 1);
	ck_assert_int_eq(smgr_write(r, 12, p), 0);
	check_page(r, 6, 12, 1);
	ck_assert_int_eq(smgr_grow(r, 19, 0), 0);
	ck_assert_int_eq(smgr_grow(r, WR_INVALID_BLKNO - 1, 2), WALRUS_ETOOBIG);
}
END_TEST

START_TEST(test_round_trip_segments)
{
	smgr_rel *r;
	ck_assert_int_eq(smgr_create(5), 0);
	ck_assert_int_eq(smgr_open(5, &r), 0);
	wr_blkno n;
	ck_assert_int_eq(smgr_nblocks(r, &n), 0);
	ck_assert_uint_eq(n, 0);
	for (wr_blkno b = 0; b < 20; b++) {
		unsigned char p[WR_PAGE_SIZE];
		make_page(p, 5, b, 0);
		ck_assert_int_eq(smgr_extend(r, b, p), 0);
		ck_assert_int_eq(smgr_nblocks(r, &n), 0);
		ck_assert_uint_eq(n, b + 1);
	}
	ck_assert_int_eq(file_size(seg_path(5, 0)), SEGSIZE);
	ck_assert_int_eq(file_size(seg_path(5, 1)), SEGSIZE);
	ck_assert_int_eq(file_size(seg_path(5, 2)), 4 * WR_PAGE_SIZE);
	ck_assert_int_eq(file_size(seg_path(5, 3)), -1);
	for (wr_blkno b = 0; b < 20; b++)
		check_page(r, 5, b, 0);
	/* Overwrite blocks on both sides of a boundary. */
	wr_blkno over[] = {7, 8, 15, 16};
	for (size_t i = 0; i < 4; i++) {
		unsigned char p[WR_PAGE_SIZE];
		make_page(p, 5, over[i], 1);
		ck_assert_int_eq(smgr_write(r, over[i], p), 0);
		check_page(r, 5, over[i], 1);
	}
	/* A fresh cache (another process) finds the same. */
	smgr_shutdown();
	ck_assert_int_eq(smgr_init(dir, SEGSIZE), 0);
	ck_assert_int_eq(smgr_open(5, &r), 0);
	ck_assert_int_eq(smgr_nblocks(r, &n), 0);
	ck_assert_uint_eq(n, 20);
	check_page(r, 5, 6, 0);
	check_page(r, 5, 8, 1);
	check_page(r, 5, 19, 0);
}
END_TEST

START_TEST(test_extend_gap)
{
	smgr_rel *r = new_rel(6, 1);
	unsigned char p[WR_PAGE_SIZE];
	make_page(p, 6, 20, 0);
	ck_assert_int_eq(smgr_extend(r, 20, p), 0); /* in segment 2: 0 and 1 become full */
	wr_blkno n;
	ck_assert_int_eq(smgr_nblocks(r, &n), 0);
	ck_assert_uint_eq(n, 21);
	ck_assert_int_eq(file_size(seg_path(6, 0)), SEGSIZE);
	ck_assert_int_eq(file_size(seg_path(6, 1)), SEGSIZE);
	check_page(r, 6, 0, 0);
	check_page(r, 6, 20, 0);
	for (wr_blkno b = 1; b < 20; b++) {
		unsigned char got[WR_PAGE_SIZE];
		ck_assert_int_eq(smgr_read(r, b, got), 0);
		ck_assert(page_is_new(got));
	}
	/* A gap inside a segment. */
	make_page(p, 6, 23, 0);
	ck_assert_int_eq(smgr_extend(r, 23, p), 0);
	ck_assert_int_eq(smgr_nblocks(r, &n), 0);
	ck_assert_uint_eq(n, 24);
	check_page(r, 6, 23, 0);
}
END_TEST

START_TEST(test_corruption_detected)
{
	smgr_rel *r = new_rel(7, 12);
	/* Block 10 is block 2 of segment 1. */
	tu_flip_bit(seg_path(7, 1), 2 * WR_PAGE_SIZE + 3000, 5);
	unsigned char got[WR_PAGE_SIZE];
	memset(got, 0x55, sizeof(got));
	ck_assert_int_eq(smgr_read(r, 10, got), WALRUS_ECORRUPT);
	const char *msg = walrus_errmsg();
	ck_assert_msg(strstr(msg, seg_path(7, 1)) != NULL, "message: %s", msg);
	ck_assert_msg(strstr(msg, "block 10") != NULL, "message: %s", msg);
	ck_assert_msg(strstr(msg, "checksum") != NULL, "message: %s", msg);
	ck_assert(page_is_new(got)); /* the bad data is not handed out */
	check_page(r, 7, 9, 0);
	check_page(r, 7, 11, 0);
	/* A flipped bit in the header (the LSN) of block 0. */
	tu_flip_bit(seg_path(7, 0), 3, 0);
	ck_assert_int_eq(smgr_read(r, 0, got), WALRUS_ECORRUPT);
	ck_assert_ptr_nonnull(strstr(walrus_errmsg(), "block 0"));
	/* A page copied into the wrong block. */
	unsigned char p[WR_PAGE_SIZE];
	make_page(p, 7, 4, 0);
	page_set_checksum(p, 4);
	int fd = open(seg_path(7, 0), O_WRONLY);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(pwrite(fd, p, WR_PAGE_SIZE, 5 * WR_PAGE_SIZE), WR_PAGE_SIZE);
	close(fd);
	ck_assert_int_eq(smgr_read(r, 5, got), WALRUS_ECORRUPT);
}
END_TEST

START_TEST(test_short_read)
{
	smgr_rel *r = new_rel(8, 3);
	unsigned char got[WR_PAGE_SIZE];
	memset(got, 0x55, sizeof(got));
	ck_assert_int_eq(smgr_read(r, 3, got), WALRUS_EIO);
	ck_assert_ptr_nonnull(
	    strstr(walrus_errmsg(), "read only 0 of " TU_PAGE_SIZE_STRING " bytes"));
	ck_assert_ptr_nonnull(strstr(walrus_errmsg(), seg_path(8, 0)));
	ck_assert(page_is_new(got));
	ck_assert_int_eq(smgr_read(r, 100, got), WALRUS_EIO); /* no such segment */
	/* A torn last block: not counted, not returned. */
	int fd = open(seg_path(8, 0), O_WRONLY | O_APPEND);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(write(fd, got, 100), 100);
	close(fd);
	wr_blkno n;
	ck_assert_int_eq(smgr_nblocks(r, &n), 0);
	ck_assert_uint_eq(n, 3);
	ck_assert_int_eq(smgr_read(r, 3, got), WALRUS_EIO);
	ck_assert_ptr_nonnull(
	    strstr(walrus_errmsg(), "read only 100 of " TU_PAGE_SIZE_STRING " bytes"));
	/* A write into a missing segment is an error, not a silent extension. */
	unsigned char p[WR_PAGE_SIZE];
	make_page(p, 8, 30, 0);
	ck_assert_int_eq(smgr_write(r, 30, p), WALRUS_ENOENT);
}
END_TEST

/* ---------------------------------------------------------------- truncate, unlink */

START_TEST(test_truncate)
{
	smgr_set_sync_hooks(NULL, record_forget, NULL);
	smgr_rel *r = new_rel(9, 20);
	wr_blkno n;
	ck_assert_int_eq(smgr_truncate(r, 9), 0);
	ck_assert_int_eq(smgr_nblocks(r, &n), 0);
	ck_assert_uint_eq(n, 9);
	ck_assert_int_eq(file_size(seg_path(9, 2)), -1);
	ck_assert_int_eq(file_size(seg_path(9, 1)), WR_PAGE_SIZE);
	ck_assert_int_eq(nforgot, 1);
	ck_assert_uint_eq(forgot_rel[0], 9);
	ck_assert_uint_eq(forgot_seg[0], 2);
	check_page(r, 9, 8, 0);

	ck_assert_int_eq(smgr_truncate(r, 8), 0); /* exactly one full segment */
	ck_assert_int_eq(file_size(seg_path(9, 1)), -1);
	ck_assert_int_eq(smgr_nblocks(r, &n), 0);
	ck_assert_uint_eq(n, 8);
	ck_assert_uint_eq(forgot_seg[1], 1);

	ck_assert_int_eq(smgr_truncate(r, 3), 0);
	ck_assert_int_eq(file_size(seg_path(9, 0)), 3 * WR_PAGE_SIZE);
	ck_assert_int_eq(smgr_truncate(r, 5), WALRUS_EINVAL); /* cannot grow */
	ck_assert_int_eq(smgr_truncate(r, 0), 0);
	ck_assert_int_eq(file_size(seg_path(9, 0)), 0);
	ck_assert_int_eq(smgr_nblocks(r, &n), 0);
	ck_assert_uint_eq(n, 0);
	unsigned char got[WR_PAGE_SIZE];
	ck_assert_int_eq(smgr_read(r, 0, got), WALRUS_EIO);

	/* And it grows again. */
	for (wr_blkno b = 0; b < 10; b++) {
		unsigned char p[WR_PAGE_SIZE];
		make_page(p, 9, b, 2);
		ck_assert_int_eq(smgr_extend(r, b, p), 0);
	}
	ck_assert_int_eq(smgr_nblocks(r, &n), 0);
	ck_assert_uint_eq(n, 10);
	check_page(r, 9, 9, 2);
}
END_TEST

START_TEST(test_unlink)
{
	smgr_set_sync_hooks(NULL, record_forget, NULL);
	new_rel(10, 18);
	ck_assert_int_eq(file_size(seg_path(10, 2)), 2 * WR_PAGE_SIZE);
	ck_assert_int_eq(smgr_unlink(10), 0);
	for (uint32_t s = 0; s < 3; s++)
		ck_assert_int_eq(file_size(seg_path(10, s)), -1);
	ck_assert(!smgr_exists(10));
	ck_assert_int_eq(nforgot, 1);
	ck_assert_uint_eq(forgot_rel[0], 10);
	ck_assert_uint_eq(forgot_seg[0], 0);
	ck_assert_int_eq(smgr_unlink(10), WALRUS_ENOENT);
	/* The relation id can be used again. */
	smgr_rel *r = new_rel(10, 2);
	check_page(r, 10, 1, 0);
}
END_TEST

/* ---------------------------------------------------------------- sync requests */

START_TEST(test_sync_hook_once_per_cycle)
{
	smgr_set_sync_hooks(record_sync, record_forget, get_cycle);
	cur_cycle = 5;
	smgr_rel *r = new_rel(11, 8); /* segment 0, full */
	ck_assert_int_eq(nreqs, 1);
	ck_assert_uint_eq(reqs[0].rel, 11);
	ck_assert_uint_eq(reqs[0].seg, 0);
	ck_assert_uint_eq(reqs[0].cycle, 5);
	ck_assert_uint_ne(reqs[0].open_seq, 0);
	ck_assert(tu_same_file(req_fds[0], seg_path(11, 0)));

	unsigned char p[WR_PAGE_SIZE];
	make_page(p, 11, 8, 0);
	ck_assert_int_eq(smgr_extend(r, 8, p), 0); /* segment 1: its own request */
	make_page(p, 11, 9, 0);
	ck_assert_int_eq(smgr_extend(r, 9, p), 0);
	ck_assert_int_eq(nreqs, 2);
	ck_assert_uint_eq(reqs[1].seg, 1);
	ck_assert(tu_same_file(req_fds[1], seg_path(11, 1)));

	cur_cycle = 6; /* a checkpoint started: the next write asks again */
	make_page(p, 11, 3, 1);
	ck_assert_int_eq(smgr_write(r, 3, p), 0);
	make_page(p, 11, 4, 1);
	ck_assert_int_eq(smgr_write(r, 4, p), 0);
	ck_assert_int_eq(nreqs, 3);
	ck_assert_uint_eq(reqs[2].cycle, 6);
	ck_assert_uint_eq(reqs[2].seg, 0);
	/* The fd handed over is the file's: it sees what was written. */
	unsigned char got[WR_PAGE_SIZE], want[WR_PAGE_SIZE];
	make_page(want, 11, 3, 1);
	page_set_checksum(want, 3);
	ck_assert_int_eq(pread(req_fds[2], got, WR_PAGE_SIZE, 3 * WR_PAGE_SIZE), WR_PAGE_SIZE);
	ck_assert_int_eq(memcmp(got, want, WR_PAGE_SIZE), 0);
	check_page(r, 11, 3, 1);

	/* A refused request fails the write, and the next write asks again. */
	cur_cycle = 7;
	hook_refuse = 1;
	make_page(p, 11, 5, 1);
	ck_assert_int_eq(smgr_write(r, 5, p), WALRUS_EBUSY);
	hook_refuse = 0;
	ck_assert_int_eq(smgr_write(r, 5, p), 0);
	ck_assert_int_eq(nreqs, 4);
	ck_assert_uint_eq(reqs[3].cycle, 7);
	smgr_shutdown(); /* every fd was handed off: nothing more */
	ck_assert_int_eq(nreqs, 4);
}
END_TEST

/*
 * With 8 real fds for 30 relations, every relation's write-time request is
 * refused, so each relation must be handed off by the before-close hook
 * when its fd is evicted (or at shutdown), with its live fd.
 */
START_TEST(test_before_close_hands_off)
{
	enum { NREL = 30 };
	ck_assert_int_eq(fdc_init(8), 0);
	smgr_set_sync_hooks(record_sync, NULL, get_cycle);
	cur_cycle = 1;
	for (wr_relid rel = 100; rel < 100 + NREL; rel++) {
		smgr_rel *r;
		ck_assert_int_eq(smgr_create(rel), 0);
		ck_assert_int_eq(smgr_open(rel, &r), 0);
		unsigned char p[WR_PAGE_SIZE];
		make_page(p, rel, 0, 0);
		hook_refuse = 1;
		ck_assert_int_eq(smgr_extend(r, 0, p), WALRUS_EBUSY);
		hook_refuse = 0;
	}
	fdc_stats st;
	fdc_get_stats(&st);
	ck_assert_int_le(st.open_now, 8);
	ck_assert_uint_gt(st.lru_closes, 0);
	ck_assert_int_eq(nreqs, NREL - 8); /* the evicted ones so far */
	smgr_shutdown();
	ck_assert_int_eq(nreqs, NREL);
	for (wr_relid rel = 100; rel < 100 + NREL; rel++) {
		int found = 0;
		for (int i = 0; i < nreqs; i++) {
			if (reqs[i].rel != rel)
				continue;
			found++;
			ck_assert_uint_eq(reqs[i].seg, 0);
			ck_assert_uint_eq(reqs[i].cycle, 1);
			ck_assert(tu_same_file(req_fds[i], seg_path(rel, 0)));
		}
		ck_assert_msg(found == 1, "relation %u: %d requests", rel, found);
	}
	/* The data is there, read through a new cache. */
	ck_assert_int_eq(smgr_init(dir, SEGSIZE), 0);
	smgr_rel *r;
	ck_assert_int_eq(smgr_open(117, &r), 0);
	check_page(r, 117, 0, 0);
}
END_TEST

/* Without a sync hook, a written fd is fsynced before the cache closes it. */
static int fsync_at_close_child(void *arg)
{
	tu_child_log_to(arg);
	TU_CHILD_CHECK(fdc_init(4) == 0);
	smgr_set_sync_hooks(NULL, NULL, NULL);
	smgr_rel *r;
	TU_CHILD_CHECK(make_rel(20, 1, &r) == 0);
	TU_CHILD_CHECK(ts_failpoint_set("fsync:EIO:/base/20") == 0);
	for (wr_relid rel = 21; rel < 30; rel++) /* pushes relation 20's fd out */
		TU_CHILD_CHECK(smgr_create(rel) == 0);
	return 1; /* not reached: the fsync at eviction must PANIC */
}

START_TEST(test_no_hook_fsyncs_at_close)
{
	tu_expect_panic(dir, fsync_at_close_child, "could not fsync file", seg_path(20, 0));
}
END_TEST

static int immedsync_child(void *arg)
{
	tu_child_log_to(arg);
	smgr_rel *r;
	TU_CHILD_CHECK(make_rel(30, 10, &r) == 0);
	smgr_immedsync(r); /* fine */
	TU_CHILD_CHECK(ts_failpoint_set("fsync:EIO:/base/30.1") == 0);
	smgr_immedsync(r);
	return 1;
}

START_TEST(test_immedsync_failure_panics)
{
	tu_expect_panic(dir, immedsync_child, "could not fsync file", seg_path(30, 1));
}
END_TEST

static int writeback_child(void *arg)
{
	tu_child_log_to(arg);
	smgr_rel *r;
	TU_CHILD_CHECK(make_rel(31, 20, &r) == 0);
	smgr_writeback(r, 2, 15); /* fine: three pieces */
	TU_CHILD_CHECK(ts_failpoint_set("sync_range:EIO:/base/31.2") == 0);
	smgr_writeback(r, 0, 12); /* does not reach segment 2 */
	smgr_writeback(r, 6, 12);
	return 1;
}

START_TEST(test_writeback_failure_panics)
{
	tu_expect_panic(dir, writeback_child, "could not sync_file_range file", seg_path(31, 2));
}
END_TEST

START_TEST(test_immedsync_clears_dirty)
{
	/* No sync hook, small cache: after immedsync, evicting the fds needs no fsync. */
	ck_assert_int_eq(fdc_init(2), 0);
	smgr_set_sync_hooks(NULL, NULL, NULL);
	smgr_rel *r = new_rel(40, 3);
	smgr_immedsync(r);
	ck_assert_int_eq(ts_failpoint_set("fsync:EIO:/base/40*0"), 0);
	for (wr_relid rel = 41; rel < 46; rel++)
		new_rel(rel, 1); /* evicts relation 40's fd: a PANIC if it fsynced */
	ck_assert_int_eq(ts_failpoint_set(NULL), 0);
	check_page(r, 40, 2, 0);
}
END_TEST

/* Files that are not relation segments pass the storage layer's before-close hook untouched. */
START_TEST(test_foreign_fd_and_writeback)
{
	smgr_set_sync_hooks(record_sync, NULL, get_cycle);
	char path[4096];
	snprintf(path, sizeof(path), "%s/other-file", dir);
	fdc_file f;
	ck_assert_int_eq(fdc_open(path, O_RDWR | O_CREAT, 0600, &f), 0);
	ck_assert_int_eq(fdc_pwrite(f, "x", 1, 0), 0);
	ck_assert_int_eq(fdc_close(f), 0);
	ck_assert_int_eq(nreqs, 0);
	smgr_rel *r = new_rel(50, 20);
	smgr_writeback(r, 0, 20);
	smgr_writeback(r, 5, 0);
	smgr_writeback(r, 18, 10); /* beyond the end: the missing segment is skipped */
	smgr_immedsync(r);
	check_page(r, 50, 19, 0);
}
END_TEST

/* ---------------------------------------------------------------- O_DIRECT */

/* Turns data_direct_io on for this process; false where the file system refuses O_DIRECT. */
static bool direct_on(void)
{
	bool use;
	ck_assert_int_eq(smgr_direct_probe(dir, WR_DIRECT_ON, false, &use), WALRUS_OK);
	smgr_set_direct(use);
	if (!use)
		fprintf(stderr, "O_DIRECT refused under %s: the O_DIRECT cases are void\n", dir);
	return use;
}

static bool handle_is_direct(smgr_rel *r, wr_blkno b)
{
	fdc_file f;
	off_t off;
	int fd;
	ck_assert_int_eq(smgr_block_handle(r, b, &f, &off), 0);
	ck_assert_int_eq(fdc_fd(f, &fd), 0);
	int fl = fcntl(fd, F_GETFL);
	ck_assert_int_ge(fl, 0);
	return (fl & O_DIRECT) != 0;
}

/*
 * With data_direct_io on, segments are opened O_DIRECT, and a caller's page
 * at any address is written and read (through an aligned copy when it is
 * not aligned: O_DIRECT refuses such memory with EINVAL); a bad checksum is
 * still reported for its file and block; write-back hints make no
 * sync_file_range call, and mapped reads are refused.
 */
START_TEST(test_direct_round_trip)
{
	if (!direct_on())
		return;
	_Alignas(4096) unsigned char mem[WR_PAGE_SIZE], spare[WR_PAGE_SIZE + 4096];
	unsigned char *odd = spare + 8; /* not aligned for O_DIRECT */
	smgr_rel *r;
	ck_assert_int_eq(smgr_create(60), 0);
	ck_assert_int_eq(smgr_open(60, &r), 0);
	for (wr_blkno b = 0; b < 12; b++) {
		unsigned char *p = b % 2 ? odd : mem;
		make_page(p, 60, b, 0);
		ck_assert_msg(smgr_extend(r, b, p) == 0, "extend %u: %s", b, walrus_errmsg());
	}
	ck_assert(handle_is_direct(r, 0));
	ck_assert(handle_is_direct(r, 9)); /* the second segment, created O_DIRECT */
	for (wr_blkno b = 0; b < 12; b++)
		check_page(r, 60, b, 0); /* into an unaligned stack page */
	make_page(odd, 60, 5, 1);
	ck_assert_int_eq(smgr_write(r, 5, odd), 0);
	ck_assert_int_eq(smgr_read(r, 5, mem), 0);
	ck_assert_int_eq(memcmp(mem, odd, WR_PAGE_SIZE), 0);
	/* Block 10 is block 2 of segment 1. */
	tu_flip_bit(seg_path(60, 1), 2 * WR_PAGE_SIZE + 3000, 5);
	ck_assert_int_eq(smgr_read(r, 10, odd), WALRUS_ECORRUPT);
	ck_assert_ptr_nonnull(strstr(walrus_errmsg(), seg_path(60, 1)));
	ck_assert_ptr_nonnull(strstr(walrus_errmsg(), "block 10"));
	ck_assert(page_is_new(odd));
	ck_assert_int_eq(ts_failpoint_set("sync_range:EIO:/base/60"), 0);
	smgr_writeback(r, 0, 12); /* would PANIC if it called sync_file_range */
	ck_assert_uint_eq(ts_failpoint_hits(), 0);
	ck_assert_int_eq(ts_failpoint_set(NULL), 0);
	ck_assert_ptr_null(smgr_map_block(60, 1));
	/* A torn last block: the direct read stops at the end of the file. */
	int fd = open(seg_path(60, 1), O_WRONLY | O_APPEND);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(write(fd, mem, 100), 100);
	close(fd);
	ck_assert_int_eq(smgr_read(r, 12, mem), WALRUS_EIO);
	ck_assert_ptr_nonnull(
	    strstr(walrus_errmsg(), "read only 100 of " TU_PAGE_SIZE_STRING " bytes"));
	smgr_set_direct(false);
}
END_TEST

static int direct_fsync_child(void *arg)
{
	tu_child_log_to(arg);
	smgr_set_direct(true);
	smgr_rel *r;
	TU_CHILD_CHECK(make_rel(61, 3, &r) == 0);
	TU_CHILD_CHECK(ts_failpoint_set("fsync:EIO:/base/61") == 0);
	smgr_immedsync(r);
	return 1;
}

/* O_DIRECT makes nothing durable: the fsync still runs, and its error PANICs. */
START_TEST(test_direct_fsync_failure_panics)
{
	if (!direct_on())
		return;
	smgr_set_direct(false);
	tu_expect_panic(dir, direct_fsync_child, "could not fsync file", seg_path(61, 0));
}
END_TEST

static int entries_in(const char *path)
{
	int n = 0;
	DIR *d = opendir(path);
	ck_assert_ptr_nonnull(d);
	struct dirent *e;
	while ((e = readdir(d)) != NULL)
		n += e->d_name[0] != '.';
	closedir(d);
	return n;
}

/*
 * The start's decision: off and auto with mmap_reads never probe; a refusal
 * (EINVAL at the O_DIRECT open, as ramfs answers) turns auto off quietly and
 * fails on, naming DIR/base and its file system; any other failure of the
 * probe leaves on as asked.  The probe leaves no file behind.
 */
START_TEST(test_direct_probe)
{
	char base[4200];
	snprintf(base, sizeof(base), "%s/base", dir);
	bool use = true;
	ck_assert_int_eq(smgr_direct_probe(dir, WR_DIRECT_OFF, false, &use), WALRUS_OK);
	ck_assert(!use);
	ck_assert_int_eq(ts_failpoint_set("open_direct:EINVAL:/base*0"), 0);
	ck_assert_int_eq(smgr_direct_probe(dir, WR_DIRECT_AUTO, true, &use), WALRUS_OK);
	ck_assert(!use);
	ck_assert_uint_eq(ts_failpoint_hits(), 0); /* mmap_reads decided it */
	use = true;
	ck_assert_int_eq(smgr_direct_probe(dir, WR_DIRECT_AUTO, false, &use), WALRUS_OK);
	ck_assert(!use);
	ck_assert_int_eq(smgr_direct_probe(dir, WR_DIRECT_ON, false, &use), WALRUS_EINVAL);
	const char *msg = walrus_errmsg();
	ck_assert_msg(strstr(msg, "data_direct_io=on, but the file system of") != NULL &&
	                  strstr(msg, base) != NULL && strstr(msg, "refuses O_DIRECT") != NULL &&
	                  strstr(msg, "Invalid argument") != NULL,
	              "message: %s", msg);
	ck_assert_int_eq(ts_failpoint_set("open_direct:ENOSPC:/base*0"), 0);
	ck_assert_int_eq(smgr_direct_probe(dir, WR_DIRECT_ON, false, &use), WALRUS_OK);
	ck_assert(use);
	ck_assert_int_eq(smgr_direct_probe(dir, WR_DIRECT_AUTO, false, &use), WALRUS_OK);
	ck_assert(!use);
	ck_assert_int_eq(ts_failpoint_set(NULL), 0);
	ck_assert_int_eq(smgr_direct_probe(dir, WR_DIRECT_AUTO, false, &use), WALRUS_OK);
	bool refused = !use;
	ck_assert_int_eq(smgr_direct_probe(dir, WR_DIRECT_ON, false, &use),
	                 refused ? WALRUS_EINVAL : WALRUS_OK);
	ck_assert_int_eq(entries_in(base), 0);
}
END_TEST

START_TEST(test_oversized_segment)
{
	smgr_rel *r = new_rel(51, 2);
	ck_assert_int_eq(truncate(seg_path(51, 0), SEGSIZE + WR_PAGE_SIZE), 0);
	wr_blkno n;
	ck_assert_int_eq(smgr_nblocks(r, &n), WALRUS_ECORRUPT);
	ck_assert_ptr_nonnull(strstr(walrus_errmsg(), seg_path(51, 0)));
}
END_TEST

/* After fdc_reset (crash restart) the relation cache's handles are stale, and their numbers reused.
 */
START_TEST(test_survives_fdc_reset)
{
	smgr_rel *r = new_rel(60, 3);
	fdc_reset();
	char path[4096];
	snprintf(path, sizeof(path), "%s/intruder", dir);
	fdc_file f;
	ck_assert_int_eq(fdc_open(path, O_RDWR | O_CREAT, 0600, &f), 0);
	check_page(r, 60, 2, 0);
	unsigned char p[WR_PAGE_SIZE];
	make_page(p, 60, 1, 1);
	ck_assert_int_eq(smgr_write(r, 1, p), 0);
	check_page(r, 60, 1, 1);
	ck_assert_int_eq(file_size(path), 0); /* nothing went to the other file */
	smgr_shutdown();
	ck_assert_str_eq(fdc_path(f), path); /* and it was not closed for us */
	ck_assert_int_eq(fdc_close(f), 0);
}
END_TEST

/* ---------------------------------------------------------------- mapped reads */

/* The application's own SIGBUS handler: counts, and jumps back. */
static sigjmp_buf app_env;
static volatile sig_atomic_t app_sigbus_calls;

static void app_sigbus(int sig, siginfo_t *si, void *uc)
{
	(void)sig;
	(void)si;
	(void)uc;
	app_sigbus_calls++;
	siglongjmp(app_env, 1);
}

typedef struct page_seen {
	wr_blkno blk;
	bool same;
} page_seen;

static void compare_page(const char *page, void *arg)
{
	page_seen *s = arg;
	unsigned char want[WR_PAGE_SIZE];
	make_page(want, 70, s->blk, 0);
	page_set_checksum(want, s->blk);
	s->same = memcmp(page, want, WR_PAGE_SIZE) == 0;
}

/* A SIGBUS outside walrus's reads: a load past the end of a file of our own. */
static bool app_fault(void)
{
	char path[4096];
	snprintf(path, sizeof(path), "%s/app-file", dir);
	int fd = open(path, O_RDWR | O_CREAT, 0600);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(ftruncate(fd, 4096), 0);
	volatile char *m = mmap(NULL, 4096, PROT_READ, MAP_SHARED, fd, 0);
	ck_assert(m != MAP_FAILED);
	ck_assert_int_eq(ftruncate(fd, 0), 0);
	bool faulted = false;
	if (sigsetjmp(app_env, 1) == 0)
		(void)m[0];
	else
		faulted = true;
	munmap((void *)m, 4096);
	close(fd);
	return faulted;
}

/*
 * A load from a mapped block past the end of its file (as a read error of
 * the device under the mapping) fails the read instead of killing the
 * process, and the relation is not read through its mappings again.  A
 * SIGBUS outside walrus's reads reaches the handler the application had;
 * smgr_shutdown puts that handler back.
 */
START_TEST(test_map_read_survives_sigbus)
{
	struct sigaction app = {.sa_sigaction = app_sigbus, .sa_flags = SA_SIGINFO}, now;
	sigemptyset(&app.sa_mask);
	ck_assert_int_eq(sigaction(SIGBUS, &app, NULL), 0);
	new_rel(70, 3);
	const char *p = smgr_map_block(70, 1);
	ck_assert_ptr_nonnull(p);
	page_seen s = {.blk = 1};
	ck_assert(smgr_map_read(70, 1, p, compare_page, &s));
	ck_assert(s.same);
	ck_assert_int_eq(truncate(seg_path(70, 0), WR_PAGE_SIZE), 0);
	s.same = true;
	ck_assert(!smgr_map_read(70, 1, p, compare_page, &s));
	ck_assert_int_eq(app_sigbus_calls, 0);
	ck_assert_ptr_null(smgr_map_block(70, 0)); /* not through the mapping again */
	ck_assert(app_fault());
	ck_assert_int_eq(app_sigbus_calls, 1);
	smgr_shutdown();
	ck_assert_int_eq(sigaction(SIGBUS, NULL, &now), 0);
	ck_assert(now.sa_sigaction == app_sigbus);
}
END_TEST

/* A mapped read of block 1 of @rel after its file was cut: false, and the process lives. */
static bool faulted_read_fails(wr_relid rel)
{
	const char *p = smgr_map_block(rel, 1);
	if (p == NULL)
		return false;
	if (truncate(seg_path(rel, 0), WR_PAGE_SIZE) != 0)
		return false;
	page_seen s = {.blk = 1};
	return !smgr_map_read(rel, 1, p, compare_page, &s);
}

/* SIGBUS ignored before walrus came: a raise() stays ignored, and walrus's
 * guard is still there for the next mapped read. */
static int ignored_stays_ignored(void *arg)
{
	(void)arg;
	struct sigaction ign = {.sa_handler = SIG_IGN};
	sigemptyset(&ign.sa_mask);
	TU_CHILD_CHECK(sigaction(SIGBUS, &ign, NULL) == 0);
	new_rel(71, 3);
	TU_CHILD_CHECK(smgr_map_block(71, 0) != NULL); /* the guard is installed */
	TU_CHILD_CHECK(raise(SIGBUS) == 0);
	TU_CHILD_CHECK(faulted_read_fails(71));
	return 0;
}

/* The default before walrus: a raise() kills, as it would have. */
/* The default disposition, whatever the process had (a sanitizer's handler). */
static int sigbus_default(void)
{
	struct sigaction dfl = {.sa_handler = SIG_DFL};
	sigemptyset(&dfl.sa_mask);
	TU_CHILD_CHECK(sigaction(SIGBUS, &dfl, NULL) == 0);
	return 0;
}

static int default_kills(void *arg)
{
	(void)arg;
	TU_CHILD_CHECK(sigbus_default() == 0);
	new_rel(72, 3);
	TU_CHILD_CHECK(smgr_map_block(72, 0) != NULL);
	(void)raise(SIGBUS);
	return 0; /* not reached */
}

START_TEST(test_guard_keeps_the_old_disposition)
{
	ck_assert_int_eq(tu_wait(tu_fork(ignored_stays_ignored, NULL)), 0);
	pid_t pid = tu_fork(default_kills, NULL);
	int st;
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	ck_assert_msg(WIFSIGNALED(st) && WTERMSIG(st) == SIGBUS, "status %#x", st);
}
END_TEST

/* An application handler installed with SA_RESETHAND and a mask: run once with
 * its mask, then the default, and walrus's guard stays over it. */
static volatile sig_atomic_t usr1_blocked, on_altstack;

static void app_oneshot(int sig, siginfo_t *si, void *uc)
{
	(void)sig;
	(void)si;
	(void)uc;
	sigset_t cur;
	stack_t ss;
	usr1_blocked = pthread_sigmask(SIG_BLOCK, NULL, &cur) == 0 && sigismember(&cur, SIGUSR1);
	on_altstack = sigaltstack(NULL, &ss) == 0 && (ss.ss_flags & SS_ONSTACK);
	app_sigbus_calls++;
	siglongjmp(app_env, 1);
}

static int oneshot_handler(void *arg)
{
	(void)arg;
	static char alt[1 << 16];
	stack_t ss = {.ss_sp = alt, .ss_size = sizeof(alt)};
	TU_CHILD_CHECK(sigaltstack(&ss, NULL) == 0);
	struct sigaction app = {.sa_sigaction = app_oneshot,
	                        .sa_flags = SA_SIGINFO | SA_RESETHAND | SA_ONSTACK};
	sigemptyset(&app.sa_mask);
	sigaddset(&app.sa_mask, SIGUSR1);
	TU_CHILD_CHECK(sigaction(SIGBUS, &app, NULL) == 0);
	new_rel(73, 3);
	TU_CHILD_CHECK(smgr_map_block(73, 0) != NULL);
	TU_CHILD_CHECK(app_fault());
	TU_CHILD_CHECK(app_sigbus_calls == 1 && usr1_blocked && on_altstack);
	TU_CHILD_CHECK(faulted_read_fails(73)); /* the guard is still there */
	(void)raise(SIGBUS);                    /* the default now: this kills */
	return 0;
}

START_TEST(test_guard_honours_resethand_mask_and_altstack)
{
	pid_t pid = tu_fork(oneshot_handler, NULL);
	int st;
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	ck_assert_msg(WIFSIGNALED(st) && WTERMSIG(st) == SIGBUS, "status %#x", st);
}
END_TEST

/* The application put a handler over ours that chains to the one it found
 * (ours): once ours is removed, it is never installed again (it would chain
 * back for ever), and mapped reads stay off. */
static struct sigaction app_prev;

static void app_chain(int sig, siginfo_t *si, void *uc)
{
	if (app_prev.sa_flags & SA_SIGINFO)
		app_prev.sa_sigaction(sig, si, uc);
}

static int chaining_handler(void *arg)
{
	(void)arg;
	TU_CHILD_CHECK(sigbus_default() == 0);
	new_rel(74, 3);
	TU_CHILD_CHECK(smgr_map_block(74, 0) != NULL); /* ours, over the default */
	struct sigaction app = {.sa_sigaction = app_chain, .sa_flags = SA_SIGINFO};
	sigemptyset(&app.sa_mask);
	TU_CHILD_CHECK(sigaction(SIGBUS, &app, &app_prev) == 0);
	smgr_shutdown();
	TU_CHILD_CHECK(smgr_init(dir, SEGSIZE) == WALRUS_OK);
	TU_CHILD_CHECK(smgr_map_block(74, 0) == NULL); /* no guard, no mapping */
	(void)raise(SIGBUS); /* app_chain -> ours -> the default: death, no loop */
	return 0;
}

START_TEST(test_guard_never_reinstalled_under_a_chaining_handler)
{
	pid_t pid = tu_fork(chaining_handler, NULL);
	int st;
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	ck_assert_msg(WIFSIGNALED(st) && WTERMSIG(st) == SIGBUS,
	              "status %#x (a loop ends in SIGSEGV)", st);
}
END_TEST

static Suite *smgr_suite(void)
{
	Suite *s = suite_create("smgr");
	TCase *tc = tcase_create("core");
	tcase_add_checked_fixture(tc, setup, NULL);
	tcase_add_test(tc, test_create_exists);
	tcase_add_test(tc, test_init_checks);
	tcase_add_test(tc, test_round_trip_segments);
	tcase_add_test(tc, test_grow_crosses_segments);
	tcase_add_test(tc, test_extend_gap);
	tcase_add_test(tc, test_corruption_detected);
	tcase_add_test(tc, test_short_read);
	tcase_add_test(tc, test_truncate);
	tcase_add_test(tc, test_unlink);
	tcase_add_test(tc, test_sync_hook_once_per_cycle);
	tcase_add_test(tc, test_before_close_hands_off);
	tcase_add_test(tc, test_no_hook_fsyncs_at_close);
	tcase_add_test(tc, test_immedsync_failure_panics);
	tcase_add_test(tc, test_writeback_failure_panics);
	tcase_add_test(tc, test_immedsync_clears_dirty);
	tcase_add_test(tc, test_foreign_fd_and_writeback);
	tcase_add_test(tc, test_oversized_segment);
	tcase_add_test(tc, test_direct_round_trip);
	tcase_add_test(tc, test_direct_fsync_failure_panics);
	tcase_add_test(tc, test_direct_probe);
	tcase_add_test(tc, test_survives_fdc_reset);
	tcase_add_test(tc, test_map_read_survives_sigbus);
	tcase_add_test(tc, test_guard_keeps_the_old_disposition);
	tcase_add_test(tc, test_guard_honours_resethand_mask_and_altstack);
	tcase_add_test(tc, test_guard_never_reinstalled_under_a_chaining_handler);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run(smgr_suite());
}
