/*
 * test_fmt_segment.c - WAL segment files: names, creation (zero-filled,
 * really allocated, exact size, idempotent) and recycling (old segments
 * become future ones or go, and nothing at or after the redo segment is
 * touched).
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "testutil.h"
#include "wal/wal.h"

#define SEG 65536u

static char waldir[512];

static void setup(void)
{
	snprintf(waldir, sizeof(waldir), "%s", tu_tmpdir("walseg"));
}

static void path_of(wr_lsn start, char *buf)
{
	wal_segment_path(waldir, SEG, start, buf, 600);
}

START_TEST(test_names)
{
	char buf[600];
	wal_segment_path("/x/wal", 16u << 20, 0x1234567ull, buf, sizeof(buf));
	ck_assert_str_eq(buf, "/x/wal/0000000001000000");
	wal_segment_path("/x/wal", SEG, 0xABCDEF0123456ull + 5, buf, sizeof(buf));
	ck_assert_str_eq(buf, "/x/wal/000ABCDEF0120000");
	wr_lsn start;
	ck_assert(wal_segment_parse_name("000ABCDEF0120000", SEG, &start));
	ck_assert_uint_eq(start, 0xABCDEF0120000ull);
	for (wr_lsn s = 0; s < 100 * (uint64_t)SEG; s += 7 * (uint64_t)SEG) {
		wal_segment_path("d", SEG, s + 77, buf, sizeof(buf));
		ck_assert(wal_segment_parse_name(buf + 2, SEG, &start));
		ck_assert_uint_eq(start, s);
	}
	static const char *bad[] = {
	    "000ABCDEF012000",   /* 15 digits */
	    "000ABCDEF01200000", /* 17 */
	    "000abcdef0120000",  /* lower case */
	    "000ABCDEF0121000",  /* not at a segment start */
	    "000ABCDEF0120000.tmp", "000ABCDEF012000G", "", "walrus.control",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		ck_assert_msg(!wal_segment_parse_name(bad[i], SEG, &start), "accepted \"%s\"",
		              bad[i]);
}
END_TEST

static void check_zero_file(const char *path, off_t size)
{
	struct stat sb;
	ck_assert_int_eq(stat(path, &sb), 0);
	ck_assert_int_eq(sb.st_size, size);
	/* Written, not sparse: later WAL writes allocate nothing. */
	ck_assert_int_ge((off_t)sb.st_blocks * 512, size);
	char *buf = malloc((size_t)size);
	int fd = open(path, O_RDONLY);
	ck_assert_int_eq(read(fd, buf, (size_t)size), size);
	close(fd);
	char *zeros = calloc(1, (size_t)size);
	ck_assert(memcmp(buf, zeros, (size_t)size) == 0);
	free(zeros);
	free(buf);
}

START_TEST(test_create)
{
	char path[600];
	path_of(3 * SEG, path);
	ck_assert_int_eq(wal_segment_create(waldir, SEG, 3 * SEG + 100), WALRUS_OK);
	check_zero_file(path, SEG);
	/* A large one is written in several chunks. */
	uint64_t big = 4u << 20;
	char bpath[600];
	wal_segment_path(waldir, big, big, bpath, sizeof(bpath));
	ck_assert_int_eq(wal_segment_create(waldir, big, big), WALRUS_OK);
	check_zero_file(bpath, (off_t)big);
	/* Idempotent, and an existing segment keeps its content. */
	int fd = open(path, O_WRONLY);
	ck_assert_int_eq(pwrite(fd, "WAL!", 4, 100), 4);
	close(fd);
	ck_assert_int_eq(wal_segment_create(waldir, SEG, 3 * SEG), WALRUS_OK);
	char got[4];
	fd = open(path, O_RDONLY);
	ck_assert_int_eq(pread(fd, got, 4, 100), 4);
	close(fd);
	ck_assert_mem_eq(got, "WAL!", 4);
	/* No temp file left behind. */
	char cmd[700];
	snprintf(cmd, sizeof(cmd), "ls '%s' | grep -q tmp", waldir);
	ck_assert_int_ne(system(cmd), 0);
	/* The wrong size is damage, naming the file. */
	ck_assert_int_eq(truncate(path, SEG - 8192), 0);
	ck_assert_int_eq(wal_segment_create(waldir, SEG, 3 * SEG), WALRUS_ECORRUPT);
	ck_assert_msg(strstr(walrus_errmsg(), path) != NULL && strstr(walrus_errmsg(), "has size"),
	              "%s", walrus_errmsg());
	/* A missing directory is an error, not a crash. */
	ck_assert_int_ne(wal_segment_create("/nonexistent/wal", SEG, SEG), WALRUS_OK);
}
END_TEST

/* Pages of the file at @path in the page cache. */
static size_t resident_pages(const char *path, size_t size)
{
	int fd = open(path, O_RDONLY);
	ck_assert_int_ge(fd, 0);
	void *m = mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0);
	ck_assert_ptr_ne(m, MAP_FAILED);
	long pg = sysconf(_SC_PAGESIZE);
	size_t n = (size + (size_t)pg - 1) / (size_t)pg, in = 0;
	unsigned char *vec = malloc(n);
	ck_assert_int_eq(mincore(m, size, vec), 0);
	for (size_t i = 0; i < n; i++)
		in += vec[i] & 1;
	free(vec);
	munmap(m, size);
	close(fd);
	return in;
}

/* For an O_DIRECT WAL the zeros bypass the page cache too; otherwise they
 * are written through it (and stay there, nothing evicting them). */
START_TEST(test_create_direct)
{
	uint64_t size = 4u << 20;
	char path[600];
	bool filled;
	ck_assert_int_eq(wal_segment_make(waldir, size, size, true, &filled), WALRUS_OK);
	ck_assert(filled);
	wal_segment_path(waldir, size, size, path, sizeof(path));
	ck_assert_uint_eq(resident_pages(path, size), 0);
	check_zero_file(path, (off_t)size);
	ck_assert_int_eq(wal_segment_make(waldir, size, 2 * size, false, &filled), WALRUS_OK);
	wal_segment_path(waldir, size, 2 * size, path, sizeof(path));
	ck_assert_uint_eq(resident_pages(path, size), size / (uint64_t)sysconf(_SC_PAGESIZE));
}
END_TEST

/* Segments 1..n, each marked with its number at offset 0. */
static void make_segments(int n)
{
	for (int i = 1; i <= n; i++) {
		ck_assert_int_eq(wal_segment_create(waldir, SEG, (uint64_t)i * SEG), WALRUS_OK);
		char path[600];
		path_of((uint64_t)i * SEG, path);
		int fd = open(path, O_WRONLY);
		ck_assert_int_eq(pwrite(fd, &i, sizeof(i), 0), sizeof(i));
		close(fd);
	}
}

/* The mark in segment @seg, 0 if absent, -1 if the file is missing. */
static int mark_of(int seg)
{
	char path[600];
	path_of((uint64_t)seg * SEG, path);
	int fd = open(path, O_RDONLY);
	if (fd < 0)
		return -1;
	int m = 0;
	ck_assert_int_eq(pread(fd, &m, sizeof(m), 0), sizeof(m));
	close(fd);
	return m;
}

static int count_segments(void)
{
	int n = 0;
	for (int i = 0; i < 200; i++)
		n += mark_of(i) != -1;
	return n;
}

static wr_options opts_with(uint64_t min_wal, uint64_t max_wal)
{
	wr_options o;
	wr_opts_defaults(&o);
	o.wal_segment_size = SEG;
	o.min_wal_size = (int64_t)min_wal;
	o.max_wal_size = (int64_t)max_wal;
	return o;
}

START_TEST(test_recycle_some)
{
	make_segments(10);
	/* redo in segment 8, insert in 9; up to 4 segments from the redo one. */
	wr_options o = opts_with(4 * SEG, 4 * SEG);
	int rec, rem;
	ck_assert_int_eq(wal_recycle(waldir, &o, 8 * SEG + 100, 9 * SEG + 50, false, &rec, &rem),
	                 WALRUS_OK);
	ck_assert_int_eq(rec, 1);
	ck_assert_int_eq(rem, 6);
	for (int i = 1; i <= 7; i++)
		ck_assert_int_eq(mark_of(i), -1);
	for (int i = 8; i <= 10; i++)
		ck_assert_int_eq(mark_of(i), i); /* untouched */
	ck_assert_int_eq(mark_of(11), 1);        /* the oldest, renamed */
	ck_assert_int_eq(count_segments(), 4);
	/* Nothing old left: a second run does nothing. */
	ck_assert_int_eq(wal_recycle(waldir, &o, 8 * SEG + 100, 9 * SEG + 50, false, &rec, &rem),
	                 WALRUS_OK);
	ck_assert_int_eq(rec + rem, 0);
}
END_TEST

START_TEST(test_recycle_all_or_none)
{
	make_segments(10);
	wr_options o = opts_with(100 * SEG, 100 * SEG);
	int rec, rem;
	/* Redo at a segment start: segment 6 holds it, 1..5 are old. */
	ck_assert_int_eq(wal_recycle(waldir, &o, 6 * SEG, 6 * SEG + 10, false, &rec, &rem),
	                 WALRUS_OK);
	ck_assert_int_eq(rec, 5);
	ck_assert_int_eq(rem, 0);
	/* Future names after the insert segment, skipping those that exist. */
	for (int i = 1; i <= 5; i++) {
		ck_assert_int_eq(mark_of(i), -1);
		ck_assert_int_eq(mark_of(10 + i), i);
	}
	for (int i = 6; i <= 10; i++)
		ck_assert_int_eq(mark_of(i), i);
	/* No room at all: everything old is removed. */
	o = opts_with(0, 0);
	ck_assert_int_eq(wal_recycle(waldir, &o, 12 * SEG + 5, 12 * SEG + 5, false, &rec, &rem),
	                 WALRUS_OK);
	ck_assert_int_eq(rec, 0);
	ck_assert_int_eq(rem, 6); /* 6..11 */
	for (int i = 12; i <= 15; i++)
		ck_assert_int_ne(mark_of(i), -1);
	ck_assert_int_eq(count_segments(), 4);
	/* Other files are ignored. */
	char other[700];
	snprintf(other, sizeof(other), "%s/walrus.notes", waldir);
	ck_assert_int_eq(tu_write_file(other, "x", 1), 0);
	ck_assert_int_eq(wal_recycle(waldir, &o, 20 * SEG, 20 * SEG, false, &rec, &rem), WALRUS_OK);
	ck_assert_int_eq(rem, 4);
	ck_assert_int_eq(access(other, F_OK), 0);
}
END_TEST

/*
 * A shutdown checkpoint after a busy cycle: segments 1..3 old, the redo and
 * insert in 4, 5..12 future ones recycled by that cycle.  Settled, only
 * min_wal_size (3 segments: 4, 5 and 6) stays; the busy estimate would
 * have kept them all.
 */
START_TEST(test_recycle_settle)
{
	make_segments(12);
	wr_options o = opts_with(3 * SEG, 100 * SEG);
	int rec, rem;
	ck_assert_int_eq(wal_recycle(waldir, &o, 4 * SEG + 100, 4 * SEG + 200, true, &rec, &rem),
	                 WALRUS_OK);
	ck_assert_int_eq(rec, 0);
	ck_assert_int_eq(rem, 3 + 6); /* 1..3 old, 7..12 future */
	for (int i = 4; i <= 6; i++)
		ck_assert_int_eq(mark_of(i), i);
	ck_assert_int_eq(count_segments(), 3);
	/* Not settled, the same directory keeps its future segments. */
	make_segments(12);
	ck_assert_int_eq(wal_recycle(waldir, &o, 4 * SEG + 100, 4 * SEG + 200, false, &rec, &rem),
	                 WALRUS_OK);
	ck_assert_int_eq(rem, 3);
	ck_assert_int_eq(count_segments(), 9);
}
END_TEST

static Suite *segment_suite(void)
{
	Suite *s = suite_create("wal-fmt-segment");
	TCase *tc = tcase_create("core");
	tcase_add_checked_fixture(tc, setup, NULL);
	tcase_add_test(tc, test_names);
	tcase_add_test(tc, test_create);
	tcase_add_test(tc, test_create_direct);
	tcase_add_test(tc, test_recycle_some);
	tcase_add_test(tc, test_recycle_all_or_none);
	tcase_add_test(tc, test_recycle_settle);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run(segment_suite());
}
