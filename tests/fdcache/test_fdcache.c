/*
 * test_fdcache.c - the fd cache: the LRU bound, reopen, hooks, the I/O
 * guard, the RLIMIT_NOFILE adjustment and every failpoint.
 *
 * libcheck forks each case, so every case starts with a fresh cache.  Cases
 * that must PANIC or change the rlimit run in a further forked child that
 * reports through its exit code.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/common.h"
#include "fdcache/fdcache.h"
#include "testsupport/testsupport.h"
#include "testutil.h"

static const char *dir;

static void setup(void)
{
	dir = tu_tmpdir("walrus-fdc");
	wr_log_set_stderr(WR_PANIC + 1);
}

static char *path_of(const char *name)
{
	static char buf[8][4096];
	static int next;
	char *p = buf[next++ % 8];
	snprintf(p, 4096, "%s/%s", dir, name);
	return p;
}

static fdc_file open_new(const char *name)
{
	fdc_file f;
	ck_assert_int_eq(fdc_open(path_of(name), O_RDWR | O_CREAT, 0600, &f), 0);
	return f;
}

/* ---------------------------------------------------------------- LRU and bound */

START_TEST(test_many_files_small_bound)
{
	enum { NFILES = 50, ROUNDS = 6 };
	ck_assert_int_eq(fdc_init(8), 0);
	ck_assert_int_eq(fdc_bound(), 8);
	fdc_file f[NFILES];
	for (int i = 0; i < NFILES; i++) {
		char name[32];
		snprintf(name, sizeof(name), "f%d", i);
		f[i] = open_new(name);
	}
	/* Interleave: each round writes every file at its own offset, in a scattered order. */
	for (int r = 0; r < ROUNDS; r++) {
		for (int k = 0; k < NFILES; k++) {
			int i = (k * 17 + r * 7) % NFILES;
			uint32_t v[64];
			for (int j = 0; j < 64; j++)
				v[j] = (uint32_t)(i * 1000 + r * 10 + j);
			ck_assert_int_eq(
			    fdc_pwrite(f[i], v, sizeof(v), (off_t)r * (off_t)sizeof(v)), 0);
		}
		fdc_stats st;
		fdc_get_stats(&st);
		ck_assert_int_le(st.open_now, 8);
	}
	for (int k = 0; k < NFILES; k++) {
		int i = (k * 31) % NFILES;
		for (int r = 0; r < ROUNDS; r++) {
			uint32_t v[64];
			ck_assert_int_eq(fdc_pread(f[i], v, sizeof(v), (off_t)r * (off_t)sizeof(v)),
			                 (ssize_t)sizeof(v));
			for (int j = 0; j < 64; j++)
				ck_assert_uint_eq(v[j], (uint32_t)(i * 1000 + r * 10 + j));
		}
	}
	fdc_stats st;
	fdc_get_stats(&st);
	ck_assert_int_le(st.open_now, 8);
	ck_assert_int_eq(st.handles, NFILES);
	ck_assert_uint_gt(st.reopens, 0);
	ck_assert_uint_eq(st.opens, NFILES + st.reopens);
	fdc_close_all();
	fdc_get_stats(&st);
	ck_assert_int_eq(st.open_now, 0);
	ck_assert_int_eq(st.handles, 0);
}
END_TEST

START_TEST(test_lru_order)
{
	ck_assert_int_eq(fdc_init(3), 0);
	fdc_file a = open_new("a"), b = open_new("b"), c = open_new("c");
	off_t size;
	ck_assert_int_eq(fdc_size(a, &size), 0); /* a is now the most recently used */
	fdc_file d = open_new("d");
	ck_assert(fdc_debug_is_open(a));
	ck_assert(!fdc_debug_is_open(b));
	ck_assert(fdc_debug_is_open(c));
	ck_assert(fdc_debug_is_open(d));
	fdc_stats st;
	fdc_get_stats(&st);
	ck_assert_uint_eq(st.lru_closes, 1);
	ck_assert_uint_eq(st.reopens, 0);
	/* Using b again reopens it and pushes out the least recently used: c. */
	ck_assert_int_eq(fdc_size(b, &size), 0);
	ck_assert(!fdc_debug_is_open(c));
	ck_assert(fdc_debug_is_open(a));
	fdc_get_stats(&st);
	ck_assert_uint_eq(st.reopens, 1);
	ck_assert_uint_eq(st.lru_closes, 2);
}
END_TEST

START_TEST(test_reopen_keeps_flags)
{
	ck_assert_int_eq(fdc_init(1), 0);
	fdc_file x;
	ck_assert_int_eq(fdc_open(path_of("x"), O_RDWR | O_CREAT | O_TRUNC | O_APPEND, 0600, &x),
	                 0);
	ck_assert_int_eq(fdc_pwrite(x, "abc", 3, 0), 0);
	uint64_t seq1 = fdc_open_seq(x);
	fdc_file y = open_new("y"); /* closes x */
	ck_assert(!fdc_debug_is_open(x));
	/* Reopened with O_APPEND (Linux appends even with an offset), without O_TRUNC. */
	ck_assert_int_eq(fdc_pwrite(x, "def", 3, 0), 0);
	ck_assert_uint_gt(fdc_open_seq(x), seq1);
	char buf[16] = {0};
	ck_assert_int_eq(fdc_pread(x, buf, sizeof(buf), 0), 6);
	ck_assert_str_eq(buf, "abcdef");
	ck_assert_str_eq(fdc_path(x), path_of("x"));
	ck_assert_int_eq(fdc_close(y), 0);
	ck_assert_int_eq(fdc_close(x), 0);
}
END_TEST

START_TEST(test_missing_file)
{
	ck_assert_int_eq(fdc_init(10), 0);
	fdc_file f;
	const char *p = path_of("does-not-exist");
	ck_assert_int_eq(fdc_open(p, O_RDWR, 0, &f), WALRUS_ENOENT);
	ck_assert_int_eq(errno, ENOENT);
	ck_assert_int_eq(f, FDC_INVALID);
	ck_assert_ptr_nonnull(strstr(walrus_errmsg(), p));
}
END_TEST

START_TEST(test_reopen_failure_names_path)
{
	ck_assert_int_eq(fdc_init(1), 0);
	fdc_file a = open_new("gone");
	open_new("other"); /* closes a */
	ck_assert_int_eq(unlink(path_of("gone")), 0);
	off_t size;
	ck_assert_int_eq(fdc_size(a, &size), WALRUS_ENOENT);
	ck_assert_ptr_nonnull(strstr(walrus_errmsg(), path_of("gone")));
}
END_TEST

START_TEST(test_bad_handle)
{
	ck_assert_int_eq(fdc_init(4), 0);
	char c;
	ck_assert_int_eq(fdc_pread(12345, &c, 1, 0), WALRUS_EINVAL);
	ck_assert_int_eq(fdc_close(-3), WALRUS_EINVAL);
	fdc_file a = open_new("a");
	ck_assert_int_eq(fdc_close(a), 0);
	ck_assert_int_eq(fdc_fsync(a), WALRUS_EINVAL); /* closed handles are invalid */
}
END_TEST

START_TEST(test_pread_eof)
{
	ck_assert_int_eq(fdc_init(4), 0);
	fdc_file a = open_new("a");
	ck_assert_int_eq(fdc_pwrite(a, "0123456789", 10, 0), 0);
	char buf[32];
	ck_assert_int_eq(fdc_pread(a, buf, sizeof(buf), 4), 6);
	ck_assert_int_eq(memcmp(buf, "456789", 6), 0);
	ck_assert_int_eq(fdc_pread(a, buf, sizeof(buf), 100), 0);
}
END_TEST

/* ---------------------------------------------------------------- RLIMIT_NOFILE */

static int rlimit_child(void *arg)
{
	(void)arg;
	struct rlimit rl;
	TU_CHILD_CHECK(getrlimit(RLIMIT_NOFILE, &rl) == 0);
	rl.rlim_cur = 40;
	TU_CHILD_CHECK(setrlimit(RLIMIT_NOFILE, &rl) == 0);
	int open_fds = tu_count_fds();
	TU_CHILD_CHECK(fdc_init(1000) == 0);
	TU_CHILD_CHECK(fdc_bound() >= 1);
	TU_CHILD_CHECK(fdc_bound() <= 40 - open_fds - FDC_RESERVED_FDS);
	fdc_file f[100];
	for (int i = 0; i < 100; i++) {
		char name[32];
		snprintf(name, sizeof(name), "r%d", i);
		TU_CHILD_CHECK(fdc_open(path_of(name), O_RDWR | O_CREAT, 0600, &f[i]) == 0);
		TU_CHILD_CHECK(fdc_pwrite(f[i], &i, sizeof(i), 0) == 0);
	}
	for (int i = 0; i < 100; i++) {
		int v = -1;
		TU_CHILD_CHECK(fdc_pread(f[i], &v, sizeof(v), 0) == (ssize_t)sizeof(v));
		TU_CHILD_CHECK(v == i);
	}
	TU_CHILD_CHECK(tu_count_fds() < 40);
	fdc_close_all();
	TU_CHILD_CHECK(tu_count_fds() == open_fds);
	return 0;
}

START_TEST(test_rlimit_bound)
{
	ck_assert_int_eq(tu_wait(tu_fork(rlimit_child, NULL)), 0);
}
END_TEST

static int rlimit_too_small_child(void *arg)
{
	(void)arg;
	struct rlimit rl;
	TU_CHILD_CHECK(getrlimit(RLIMIT_NOFILE, &rl) == 0);
	rl.rlim_cur = (rlim_t)(tu_count_fds() + FDC_RESERVED_FDS);
	TU_CHILD_CHECK(setrlimit(RLIMIT_NOFILE, &rl) == 0);
	TU_CHILD_CHECK(fdc_init(1000) == WALRUS_ELIMIT);
	TU_CHILD_CHECK(strstr(walrus_errmsg(), "RLIMIT_NOFILE") != NULL);
	rl.rlim_cur++; /* exactly one left: that is enough */
	TU_CHILD_CHECK(setrlimit(RLIMIT_NOFILE, &rl) == 0);
	TU_CHILD_CHECK(fdc_init(1000) == 0);
	TU_CHILD_CHECK(fdc_bound() == 1);
	return 0;
}

START_TEST(test_rlimit_too_small)
{
	ck_assert_int_eq(tu_wait(tu_fork(rlimit_too_small_child, NULL)), 0);
}
END_TEST

START_TEST(test_init_rejects_zero)
{
	ck_assert_int_eq(fdc_init(0), WALRUS_EINVAL);
}
END_TEST

/* EMFILE although under the bound: give up one of ours and retry once. */
START_TEST(test_emfile_retry)
{
	ck_assert_int_eq(fdc_init(10), 0);
	fdc_file a = open_new("a");
	ck_assert_int_eq(ts_failpoint_set("open:EMFILE"), 0);
	fdc_file b = open_new("b");
	ck_assert(!fdc_debug_is_open(a));
	ck_assert(fdc_debug_is_open(b));
	fdc_stats st;
	fdc_get_stats(&st);
	ck_assert_uint_eq(st.lru_closes, 1);
	/* With nothing of ours to give up, the error stands. */
	fdc_close_all();
	fdc_file c;
	ck_assert_int_eq(ts_failpoint_set("open:ENFILE"), 0);
	ck_assert_int_ne(fdc_open(path_of("c"), O_RDWR | O_CREAT, 0600, &c), 0);
	ck_assert_int_eq(errno, ENFILE);
}
END_TEST

/* ---------------------------------------------------------------- before-close hook */

static int hook_calls;
static int hook_bad_fd;
static fdc_file hook_last;
static int hook_result;

static int record_hook(fdc_file f, int fd, const char *path)
{
	struct stat st;
	hook_calls++;
	hook_last = f;
	if (fstat(fd, &st) != 0 || strcmp(path, fdc_path(f)) != 0 || !fdc_is_dirty(f))
		hook_bad_fd++;
	return hook_result;
}

START_TEST(test_hook_only_for_dirty)
{
	ck_assert_int_eq(fdc_init(2), 0);
	fdc_set_before_close(record_hook);
	fdc_file a = open_new("a");
	ck_assert_int_eq(fdc_pwrite(a, "x", 1, 0), 0);
	fdc_file b = open_new("b");
	ck_assert(fdc_is_dirty(a));
	ck_assert(!fdc_is_dirty(b));
	open_new("c"); /* evicts a: dirty */
	ck_assert_int_eq(hook_calls, 1);
	ck_assert_int_eq(hook_last, a);
	open_new("d"); /* evicts b: clean */
	ck_assert_int_eq(hook_calls, 1);
	/* a stays dirty (nobody cleared it): reopened and closed, it goes through the hook again.
	 */
	ck_assert(fdc_is_dirty(a));
	off_t size;
	ck_assert_int_eq(fdc_size(a, &size), 0); /* reopens a, evicts c: clean */
	ck_assert_int_eq(hook_calls, 1);
	ck_assert_int_eq(fdc_close(a), 0);
	ck_assert_int_eq(hook_calls, 2);
	/* A cleared handle is closed without the hook. */
	fdc_file e = open_new("e");
	ck_assert_int_eq(fdc_pwrite(e, "y", 1, 0), 0);
	fdc_clear_dirty(e);
	ck_assert_int_eq(fdc_close(e), 0);
	ck_assert_int_eq(hook_calls, 2);
	/* close_all: only the dirty ones. */
	fdc_file g = open_new("g");
	ck_assert_int_eq(fdc_truncate(g, 100), 0); /* truncate dirties too */
	fdc_close_all();
	ck_assert_int_eq(hook_calls, 3);
	ck_assert_int_eq(hook_bad_fd, 0);
	fdc_stats st;
	fdc_get_stats(&st);
	ck_assert_uint_eq(st.hook_calls, 3);
}
END_TEST

START_TEST(test_hook_error_prevents_close)
{
	ck_assert_int_eq(fdc_init(1), 0);
	fdc_set_before_close(record_hook);
	fdc_file a = open_new("a");
	ck_assert_int_eq(fdc_pwrite(a, "x", 1, 0), 0);
	hook_result = WALRUS_EIO;
	ck_assert_int_eq(fdc_close(a), WALRUS_EIO);
	ck_assert(fdc_debug_is_open(a));
	/* An eviction refused by the hook fails the open that needed the slot. */
	fdc_file b;
	ck_assert_int_eq(fdc_open(path_of("b"), O_RDWR | O_CREAT, 0600, &b), WALRUS_EIO);
	ck_assert(fdc_debug_is_open(a));
	hook_result = 0;
	ck_assert_int_eq(fdc_open(path_of("b"), O_RDWR | O_CREAT, 0600, &b), 0);
	ck_assert(!fdc_debug_is_open(a));
	ck_assert_int_eq(fdc_close(a), 0);
	ck_assert_int_eq(fdc_close(b), 0);
}
END_TEST

static int close_panic_child(void *arg)
{
	(void)arg;
	wr_set_panic_handler(tu_panic_exit);
	TU_CHILD_CHECK(fdc_init(4) == 0);
	fdc_file a, b;
	TU_CHILD_CHECK(fdc_open(path_of("clean"), O_RDWR | O_CREAT, 0600, &b) == 0);
	TU_CHILD_CHECK(fdc_open(path_of("dirty"), O_RDWR | O_CREAT, 0600, &a) == 0);
	TU_CHILD_CHECK(fdc_pwrite(a, "x", 1, 0) == 0);
	TU_CHILD_CHECK(ts_failpoint_set("close:EIO*0") == 0);
	TU_CHILD_CHECK(fdc_close(b) == 0); /* never written: only a warning */
	fdc_close(a);
	return 1; /* not reached */
}

START_TEST(test_close_failure_panics)
{
	ck_assert_int_eq(tu_wait(tu_fork(close_panic_child, NULL)), TU_PANIC_EXIT);
}
END_TEST

/* ---------------------------------------------------------------- failpoints */

/* Sets @spec, checks that @call fails with @err and @code, and that a call on another file passes.
 */
static void expect_fail(int rc, int err)
{
	ck_assert_int_ne(rc, 0);
	ck_assert_int_eq(errno, err);
	ck_assert_int_eq(rc, wr_errno_code(err));
}

static void touch(const char *name)
{
	fdc_file f = open_new(name);
	ck_assert_int_eq(fdc_close(f), 0);
}

/* A file gone between readdir and its stat or its open (injected ENOENT) is
 * skipped by the directory walk; any other error still fails it. */
START_TEST(test_sync_tree_skips_vanished_files)
{
	ck_assert_int_eq(fdc_init(16), 0);
	touch("a");
	touch("b");
	touch("gone-at-stat");
	touch("gone-at-open");
	uint64_t n = 0;
	ck_assert_int_eq(ts_failpoint_set("stat:ENOENT:gone-at-stat;open:ENOENT:gone-at-open"), 0);
	ck_assert_int_eq(fdc_sync_tree(dir, &n), 0);
	ck_assert_uint_eq(n, 2);
	ck_assert_uint_eq(ts_failpoint_hits(), 2);
	ck_assert_int_eq(ts_failpoint_set("stat:EACCES:gone-at-stat"), 0);
	ck_assert_int_ne(fdc_sync_tree(dir, &n), 0);
	ck_assert_ptr_nonnull(strstr(walrus_errmsg(), "gone-at-stat"));
	ck_assert_int_eq(ts_failpoint_set("open:EIO:gone-at-open"), 0);
	ck_assert_int_ne(fdc_sync_tree(dir, &n), 0);
	ck_assert_int_eq(ts_failpoint_set(NULL), 0);
	ck_assert_int_eq(fdc_sync_tree(dir, &n), 0);
	ck_assert_uint_eq(n, 4);
}
END_TEST

START_TEST(test_failpoint_each_op)
{
	ck_assert_int_eq(fdc_init(16), 0);
	fdc_file t = open_new("target"), o = open_new("other");
	char buf[8] = "abcdefg";
	ck_assert_int_eq(fdc_pwrite(t, buf, 8, 0), 0);
	ck_assert_int_eq(fdc_pwrite(o, buf, 8, 0), 0);
	uint64_t hits = ts_failpoint_hits();

	ck_assert_int_eq(ts_failpoint_set("pread:EIO:target"), 0);
	ck_assert_int_eq(fdc_pread(o, buf, 8, 0), 8);
	expect_fail((int)fdc_pread(t, buf, 8, 0), EIO);

	ck_assert_int_eq(ts_failpoint_set("pwrite:ENOSPC:target"), 0);
	ck_assert_int_eq(fdc_pwrite(o, buf, 8, 0), 0);
	expect_fail(fdc_pwrite(t, buf, 8, 0), ENOSPC);
	ck_assert_int_eq(fdc_pwrite(t, buf, 8, 0), 0); /* count 1: once */

	ck_assert_int_eq(ts_failpoint_set("fsync:EIO:target"), 0);
	ck_assert_int_eq(fdc_fsync(o), 0);
	expect_fail(fdc_fsync(t), EIO);

	ck_assert_int_eq(ts_failpoint_set("fdatasync:EROFS:target"), 0);
	ck_assert_int_eq(fdc_fdatasync(o), 0);
	expect_fail(fdc_fdatasync(t), EROFS);

	ck_assert_int_eq(ts_failpoint_set("sync_range:EIO:target"), 0);
	ck_assert_int_eq(fdc_sync_range(o, 0, 8, SYNC_FILE_RANGE_WRITE), 0);
	expect_fail(fdc_sync_range(t, 0, 8, SYNC_FILE_RANGE_WRITE), EIO);

	ck_assert_int_eq(ts_failpoint_set("truncate:EFBIG:target"), 0);
	ck_assert_int_eq(fdc_truncate(o, 8), 0);
	expect_fail(fdc_truncate(t, 8), EFBIG);

	ck_assert_int_eq(ts_failpoint_set("fallocate:EDQUOT:target"), 0);
	ck_assert_int_eq(fdc_fallocate(o, 0, 4096), 0);
	expect_fail(fdc_fallocate(t, 0, 4096), EDQUOT);

	fdc_file n;
	ck_assert_int_eq(ts_failpoint_set("open:EACCES:newfile"), 0);
	ck_assert_int_eq(fdc_open(path_of("ok-file"), O_RDWR | O_CREAT, 0600, &n), 0);
	expect_fail(fdc_open(path_of("newfile"), O_RDWR | O_CREAT, 0600, &n), EACCES);

	ck_assert_int_eq(ts_failpoint_set("rename:EPERM:target"), 0);
	ck_assert_int_eq(fdc_rename(path_of("ok-file"), path_of("ok-file2")), 0);
	expect_fail(fdc_rename(path_of("target"), path_of("target2")), EPERM);
	ck_assert_int_eq(access(path_of("target"), F_OK), 0);

	ck_assert_int_eq(ts_failpoint_set("unlink:EBUSY-NOT-A-NAME"), WALRUS_EINVAL);
	ck_assert_int_eq(ts_failpoint_set("unlink:EACCES:target"), 0);
	ck_assert_int_eq(fdc_unlink(path_of("ok-file2")), 0);
	expect_fail(fdc_unlink(path_of("target")), EACCES);
	ck_assert_int_eq(access(path_of("target"), F_OK), 0);

	ck_assert_int_eq(ts_failpoint_set("fsync_dir:EIO"), 0);
	ck_assert_int_eq(fdc_fsync_path(path_of("other")), 0); /* a file: not fsync_dir */
	expect_fail(fdc_fsync_parent(path_of("other")), EIO);
	ck_assert_int_eq(ts_failpoint_set("fsync_dir:EIO"), 0);
	expect_fail(fdc_fsync_path(dir), EIO);

	ck_assert_int_eq(ts_failpoint_set("fsync:EIO:other"), 0);
	expect_fail(fdc_fsync_path(path_of("other")), EIO);

	ck_assert_int_eq(ts_failpoint_set("mkdir:ENOSPC:sub"), 0);
	expect_fail(fdc_mkdir(path_of("sub"), 0700), ENOSPC);
	ck_assert_int_eq(fdc_mkdir(path_of("sub"), 0700), 0);

	ck_assert_int_eq(ts_failpoint_set("any:EINVAL:other"), 0);
	expect_fail(fdc_fsync(o), EINVAL);
	ck_assert_int_eq(ts_failpoint_set("any:EBADF:other"), 0);
	expect_fail((int)fdc_pread(o, buf, 8, 0), EBADF);

	/* close: fires, but a clean fd's close failure is only logged. */
	ck_assert_int_eq(ts_failpoint_set("close:EIO:other"), 0);
	uint64_t before = ts_failpoint_hits();
	fdc_clear_dirty(o);
	ck_assert_int_eq(fdc_close(o), 0);
	ck_assert_uint_eq(ts_failpoint_hits(), before + 1);

	ck_assert_uint_eq(ts_failpoint_hits(), hits + 17);
	ck_assert_int_eq(ts_failpoint_set(NULL), 0);
	ck_assert_int_eq(fdc_fsync(t), 0);
}
END_TEST

START_TEST(test_failpoint_skip_count)
{
	ck_assert_int_eq(fdc_init(4), 0);
	fdc_file a = open_new("a");
	ck_assert_int_eq(ts_failpoint_set("pwrite:EIO:/a@2*3"), 0);
	int results[8];
	for (int i = 0; i < 8; i++)
		results[i] = fdc_pwrite(a, "x", 1, i);
	int expect[8] = {0, 0, WALRUS_EIO, WALRUS_EIO, WALRUS_EIO, 0, 0, 0};
	for (int i = 0; i < 8; i++)
		ck_assert_int_eq(results[i], expect[i]);
	ck_assert_uint_eq(ts_failpoint_hits(), 3);

	ck_assert_int_eq(ts_failpoint_set("fsync:EIO*0"), 0); /* forever */
	for (int i = 0; i < 10; i++)
		ck_assert_int_eq(fdc_fsync(a), WALRUS_EIO);
	ck_assert_uint_eq(ts_failpoint_hits(), 13);

	/* Several entries; the path filter keeps the second away from "a". */
	ck_assert_int_eq(ts_failpoint_set(" fdatasync:EIO:nomatch ; fdatasync:ENOSPC@1 ;"), 0);
	ck_assert_int_eq(fdc_fdatasync(a), 0);
	expect_fail(fdc_fdatasync(a), ENOSPC);
	ck_assert_int_eq(fdc_fdatasync(a), 0);
}
END_TEST

START_TEST(test_failpoint_env)
{
	setenv("WALRUS_FAILPOINTS", "fsync:ENOSPC", 1);
	ck_assert_int_eq(fdc_init(4), 0);
	unsetenv("WALRUS_FAILPOINTS");
	fdc_file a = open_new("a");
	expect_fail(fdc_fsync(a), ENOSPC);
	setenv("WALRUS_FAILPOINTS", "fsync:ENOSUCH", 1);
	ck_assert_int_eq(fdc_init(4), WALRUS_EINVAL);
	unsetenv("WALRUS_FAILPOINTS");
}
END_TEST

static int observed_writes;
static size_t observed_bytes;

static void observer(const char *path, off_t off, size_t len, const void *buf)
{
	(void)path;
	(void)off;
	(void)buf;
	observed_writes++;
	observed_bytes += len;
}

START_TEST(test_failpoint_short_write)
{
	ck_assert_int_eq(fdc_init(4), 0);
	fdc_set_write_observer(observer);
	fdc_file a = open_new("a");
	char page[8192];
	for (size_t i = 0; i < sizeof(page); i++)
		page[i] = (char)(i * 7);
	ck_assert_int_eq(ts_failpoint_set("pwrite:short*0"), 0);
	ck_assert_int_eq(fdc_pwrite(a, page, sizeof(page), 8192), 0);
	ck_assert_uint_gt(ts_failpoint_hits(), 10); /* halves down to single bytes */
	ck_assert_int_eq(ts_failpoint_set(""), 0);
	char back[8192];
	ck_assert_int_eq(fdc_pread(a, back, sizeof(back), 8192), (ssize_t)sizeof(back));
	ck_assert_int_eq(memcmp(page, back, sizeof(page)), 0);
	ck_assert_int_eq(observed_writes, 1); /* one call observed, whole length */
	ck_assert_uint_eq(observed_bytes, sizeof(page));
}
END_TEST

START_TEST(test_failpoint_invalid)
{
	const char *bad[] = {
	    "bogus:EIO",   "fsync",       "fsync:",        "fsync:EWHAT",
	    "fsync:EIO@",  "fsync:EIO@x", "fsync:EIO*",    "fsync:EIO*2x",
	    "fsync:short", ":EIO",        "fsync:EIO;zzz", "pwrite:eio",
	};
	ck_assert_int_eq(fdc_init(4), 0);
	ck_assert_int_eq(ts_failpoint_set("fsync:EIO*0"), 0);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		ck_assert_msg(ts_failpoint_set(bad[i]) == WALRUS_EINVAL, "accepted \"%s\"", bad[i]);
		ck_assert_msg(strlen(walrus_errmsg()) > 0, "no message for \"%s\"", bad[i]);
	}
	/* A rejected spec leaves the one in force. */
	fdc_file a = open_new("a");
	ck_assert_int_eq(fdc_fsync(a), WALRUS_EIO);
	ck_assert_int_eq(ts_failpoint_set("pwrite:short;fsync:EIO:with:colons@0*1"), 0);
	ck_assert_int_eq(ts_failpoint_set(NULL), 0);
	ck_assert_int_eq(fdc_fsync(a), 0);
}
END_TEST

/* An fsync error, even EINTR, is reported once and never retried. */
START_TEST(test_fsync_not_retried)
{
	ck_assert_int_eq(fdc_init(4), 0);
	fdc_file a = open_new("a");
	ck_assert_int_eq(ts_failpoint_set("fsync:EINTR"), 0);
	ck_assert_int_ne(fdc_fsync(a), 0);
	ck_assert_int_eq(errno, EINTR);
	ck_assert_ptr_nonnull(strstr(walrus_errmsg(), "could not fsync file"));
	ck_assert_uint_eq(ts_failpoint_hits(), 1);
	/* EINTR from pread/pwrite is retried. */
	ck_assert_int_eq(ts_failpoint_set("pwrite:EINTR*3;pread:EINTR*3"), 0);
	ck_assert_int_eq(fdc_pwrite(a, "hello", 5, 0), 0);
	char buf[5];
	ck_assert_int_eq(fdc_pread(a, buf, 5, 0), 5);
	ck_assert_int_eq(memcmp(buf, "hello", 5), 0);
	ck_assert_uint_eq(ts_failpoint_hits(), 7);
}
END_TEST

START_TEST(test_failed_write_is_dirty)
{
	ck_assert_int_eq(fdc_init(4), 0);
	fdc_set_write_observer(observer);
	fdc_file a = open_new("a");
	ck_assert_int_eq(ts_failpoint_set("pwrite:ENOSPC"), 0);
	ck_assert_int_eq(fdc_pwrite(a, "x", 1, 0), WALRUS_ENOSPC);
	ck_assert(fdc_is_dirty(a));
	ck_assert_int_eq(observed_writes, 0);
	ck_assert_int_eq(fdc_fsync(a), 0);
	ck_assert(fdc_is_dirty(a)); /* fsync clears nothing: hand-off is explicit */
}
END_TEST

/* ---------------------------------------------------------------- I/O guard */

static int guard_enters, guard_exits, guard_refuse;

static int guard_enter(void)
{
	if (guard_refuse)
		return WALRUS_ERESTART;
	guard_enters++;
	return 0;
}

static void guard_exit(void)
{
	guard_exits++;
}

START_TEST(test_io_guard)
{
	ck_assert_int_eq(fdc_init(4), 0);
	fdc_set_io_guard(guard_enter, guard_exit);
	fdc_file a = open_new("a");
	ck_assert_int_eq(fdc_pwrite(a, "abc", 3, 0), 0);
	ck_assert_int_eq(fdc_fsync(a), 0);
	ck_assert_int_eq(fdc_fdatasync(a), 0);
	ck_assert_int_eq(fdc_sync_range(a, 0, 3, SYNC_FILE_RANGE_WRITE), 0);
	ck_assert_int_eq(fdc_truncate(a, 3), 0);
	ck_assert_int_eq(fdc_fallocate(a, 0, 3), 0);
	ck_assert_int_eq(fdc_fsync_path(path_of("a")), 0);
	ck_assert_int_eq(fdc_fsync_parent(path_of("a")), 0);
	ck_assert_int_eq(fdc_rename(path_of("a"), path_of("b")), 0);
	ck_assert_int_eq(fdc_rename(path_of("b"), path_of("a")), 0);
	ck_assert_int_eq(guard_enters, 10);
	ck_assert_int_eq(guard_exits, 10);
	char buf[3];
	ck_assert_int_eq(fdc_pread(a, buf, 3, 0), 3); /* reads are not guarded */
	ck_assert_int_eq(guard_enters, 10);

	guard_refuse = 1;
	ck_assert_int_eq(fdc_pwrite(a, "XYZ", 3, 0), WALRUS_ERESTART);
	ck_assert_int_eq(fdc_fsync(a), WALRUS_ERESTART);
	ck_assert_int_eq(fdc_truncate(a, 0), WALRUS_ERESTART);
	ck_assert_int_eq(fdc_unlink(path_of("a")), WALRUS_ERESTART);
	ck_assert_int_eq(fdc_rename(path_of("a"), path_of("c")), WALRUS_ERESTART);
	ck_assert_int_eq(fdc_fsync_path(dir), WALRUS_ERESTART);
	ck_assert_int_eq(guard_exits, 10);
	guard_refuse = 0;
	ck_assert_int_eq(fdc_pread(a, buf, 3, 0), 3);
	ck_assert_int_eq(memcmp(buf, "abc", 3), 0);
	ck_assert_int_eq(access(path_of("a"), F_OK), 0);
	ck_assert_int_eq(fdc_unlink(path_of("a")), 0);
	ck_assert_int_eq(guard_exits, guard_enters);
}
END_TEST

/* ---------------------------------------------------------------- path operations, cleanup */

START_TEST(test_path_ops)
{
	ck_assert_int_eq(fdc_init(4), 0);
	ck_assert_int_eq(fdc_mkdir(path_of("d"), 0700), 0);
	ck_assert_int_eq(fdc_mkdir(path_of("d"), 0700), 0); /* exists as a directory: fine */
	ck_assert_int_eq(tu_write_file(path_of("f"), "x", 1), 0);
	ck_assert_int_ne(fdc_mkdir(path_of("f"), 0700), 0); /* exists, not a directory */
	ck_assert_int_eq(errno, EEXIST);
	ck_assert_int_eq(fdc_fsync_path(path_of("d")), 0);
	ck_assert_int_eq(fdc_fsync_path(path_of("f")), 0);
	ck_assert_int_eq(fdc_fsync_parent(path_of("d/nothing-yet")), 0);
	ck_assert_int_eq(fdc_fsync_path(path_of("missing")), WALRUS_ENOENT);
	ck_assert_ptr_nonnull(strstr(walrus_errmsg(), path_of("missing")));
	ck_assert_int_eq(fdc_unlink(path_of("missing")), WALRUS_ENOENT);
	ck_assert_int_eq(fdc_rename(path_of("f"), path_of("d/g")), 0);
	ck_assert_int_eq(access(path_of("d/g"), F_OK), 0);
	ck_assert_int_ne(fdc_rename(path_of("nope"), path_of("d/h")), 0);
	ck_assert_ptr_nonnull(strstr(walrus_errmsg(), path_of("nope")));
}
END_TEST

START_TEST(test_fd_count_baseline)
{
	int base = tu_count_fds();
	ck_assert_int_eq(fdc_init(8), 0);
	fdc_set_before_close(record_hook);
	for (int i = 0; i < 20; i++) {
		char name[16];
		snprintf(name, sizeof(name), "c%d", i);
		fdc_file f = open_new(name);
		ck_assert_int_eq(fdc_pwrite(f, "z", 1, 0), 0);
	}
	ck_assert_int_eq(fdc_fsync_path(dir), 0);
	ck_assert_int_le(tu_count_fds(), base + 8);
	fdc_close_all();
	ck_assert_int_eq(tu_count_fds(), base);
	ck_assert_int_eq(hook_calls, 20);
	ck_assert_int_eq(hook_bad_fd, 0);
	/* fdc_reset: closes without hooks. */
	for (int i = 0; i < 5; i++) {
		char name[16];
		snprintf(name, sizeof(name), "c%d", i);
		fdc_file f = open_new(name);
		ck_assert_int_eq(fdc_pwrite(f, "z", 1, 0), 0);
	}
	fdc_reset();
	ck_assert_int_eq(hook_calls, 20);
	ck_assert_int_eq(tu_count_fds(), base);
	fdc_stats st;
	fdc_get_stats(&st);
	ck_assert_int_eq(st.handles, 0);
	ck_assert_int_eq(st.open_now, 0);
}
END_TEST

START_TEST(test_tags_and_handles_reused)
{
	ck_assert_int_eq(fdc_init(4), 0);
	fdc_file a = open_new("a");
	ck_assert_uint_eq(fdc_get_tag(a), 0);
	fdc_set_tag(a, 42);
	ck_assert_uint_eq(fdc_get_tag(a), 42);
	int fd;
	ck_assert_int_eq(fdc_fd(a, &fd), 0);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(fdc_close(a), 0);
	fdc_file b = open_new("b"); /* reuses the slot, with nothing of a's */
	ck_assert_uint_eq(fdc_get_tag(b), 0);
	ck_assert(!fdc_is_dirty(b));
	ck_assert_str_eq(fdc_path(b), path_of("b"));
}
END_TEST

START_TEST(test_close_all_keeps_refused)
{
	ck_assert_int_eq(fdc_init(4), 0);
	fdc_set_before_close(record_hook);
	fdc_file a = open_new("a");
	fdc_file b = open_new("b");
	ck_assert_int_eq(fdc_pwrite(a, "x", 1, 0), 0);
	ck_assert_int_eq(fdc_advise_willneed(b, 0, 4096), 0);
	hook_result = WALRUS_EIO;
	fdc_close_all(); /* a's hand-off fails: a stays, b goes */
	fdc_stats st;
	fdc_get_stats(&st);
	ck_assert_int_eq(st.handles, 1);
	ck_assert(fdc_debug_is_open(a));
	hook_result = 0;
	fdc_close_all();
	fdc_get_stats(&st);
	ck_assert_int_eq(st.handles, 0);
}
END_TEST

static Suite *fdcache_suite(void)
{
	Suite *s = suite_create("fdcache");
	TCase *tc = tcase_create("core");
	tcase_add_checked_fixture(tc, setup, NULL);
	tcase_add_test(tc, test_many_files_small_bound);
	tcase_add_test(tc, test_lru_order);
	tcase_add_test(tc, test_reopen_keeps_flags);
	tcase_add_test(tc, test_missing_file);
	tcase_add_test(tc, test_reopen_failure_names_path);
	tcase_add_test(tc, test_bad_handle);
	tcase_add_test(tc, test_pread_eof);
	tcase_add_test(tc, test_rlimit_bound);
	tcase_add_test(tc, test_rlimit_too_small);
	tcase_add_test(tc, test_init_rejects_zero);
	tcase_add_test(tc, test_emfile_retry);
	tcase_add_test(tc, test_hook_only_for_dirty);
	tcase_add_test(tc, test_hook_error_prevents_close);
	tcase_add_test(tc, test_close_failure_panics);
	tcase_add_test(tc, test_failpoint_each_op);
	tcase_add_test(tc, test_sync_tree_skips_vanished_files);
	tcase_add_test(tc, test_failpoint_skip_count);
	tcase_add_test(tc, test_failpoint_env);
	tcase_add_test(tc, test_failpoint_short_write);
	tcase_add_test(tc, test_failpoint_invalid);
	tcase_add_test(tc, test_fsync_not_retried);
	tcase_add_test(tc, test_failed_write_is_dirty);
	tcase_add_test(tc, test_io_guard);
	tcase_add_test(tc, test_path_ops);
	tcase_add_test(tc, test_fd_count_baseline);
	tcase_add_test(tc, test_tags_and_handles_reused);
	tcase_add_test(tc, test_close_all_keeps_refused);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run(fdcache_suite());
}
