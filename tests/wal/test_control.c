/*
 * test_control.c - the control file: round trip, atomic replacement when
 * the new file cannot be made durable, and every kind of damage reported
 * as such (bad CRC, bad magic, other version, missing, truncated).
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testsupport/testsupport.h"
#include "testutil.h"
#include "wal/wal.h"

static const char *dir;
static char path[4096];

static void setup(void)
{
	dir = tu_tmpdir("walrus-control");
	wr_log_set_stderr(WR_PANIC + 1);
	ck_assert_int_eq(fdc_init(100), 0);
	ts_failpoint_set(NULL);
	snprintf(path, sizeof(path), "%s/%s", dir, WAL_CONTROL_FILE);
}

static wal_control sample(uint64_t ckpt)
{
	wal_control c = {
	    .sysid = 0x1234567890abcdefull,
	    .state = WAL_DB_IN_PRODUCTION,
	    .wal_seg_size = 16u << 20,
	    .data_seg_size = 1u << 30,
	    .checkpoint_lsn = ckpt,
	    .redo_lsn = ckpt - 100,
	    .prev_checkpoint_lsn = ckpt - 5000,
	    .checkpoint_time_us = 1700000000000000ull,
	    .next_relid = 42,
	};
	return c;
}

static void assert_same(const wal_control *a, const wal_control *b)
{
	ck_assert_uint_eq(a->sysid, b->sysid);
	ck_assert_uint_eq(a->state, b->state);
	ck_assert_uint_eq(a->wal_seg_size, b->wal_seg_size);
	ck_assert_uint_eq(a->data_seg_size, b->data_seg_size);
	ck_assert_uint_eq(a->checkpoint_lsn, b->checkpoint_lsn);
	ck_assert_uint_eq(a->redo_lsn, b->redo_lsn);
	ck_assert_uint_eq(a->prev_checkpoint_lsn, b->prev_checkpoint_lsn);
	ck_assert_uint_eq(a->checkpoint_time_us, b->checkpoint_time_us);
	ck_assert_uint_eq(a->next_relid, b->next_relid);
}

static void assert_msg_has(const char *what)
{
	ck_assert_msg(strstr(walrus_errmsg(), what) != NULL, "message \"%s\" lacks \"%s\"",
	              walrus_errmsg(), what);
}

static off_t size_of(const char *p)
{
	int fd = open(p, O_RDONLY);
	if (fd < 0)
		return -1;
	off_t s = lseek(fd, 0, SEEK_END);
	close(fd);
	return s;
}

START_TEST(round_trip)
{
	wal_control c = sample(0x2000000), got;
	ck_assert_int_eq(wal_control_write(dir, &c), 0);
	ck_assert_int_eq(size_of(path), 512);
	memset(&got, 0xAA, sizeof(got));
	ck_assert_int_eq(wal_control_read(dir, &got), 0);
	assert_same(&c, &got);
	ck_assert_uint_eq(got.magic, WAL_CONTROL_MAGIC);
	ck_assert_uint_eq(got.version, WAL_CONTROL_VERSION);
	ck_assert_uint_eq(got.page_size, WR_PAGE_SIZE);
	/* Replacing it again works, and leaves no temp file. */
	c = sample(0x3000000);
	ck_assert_int_eq(wal_control_write(dir, &c), 0);
	ck_assert_int_eq(wal_control_read(dir, &got), 0);
	assert_same(&c, &got);
	char tmp[4200];
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	ck_assert_int_eq(access(tmp, F_OK), -1);
}
END_TEST

START_TEST(atomic_replace)
{
	wal_control old = sample(0x2000000), fresh = sample(0x5000000), got;
	ck_assert_int_eq(wal_control_write(dir, &old), 0);
	ck_assert_int_eq(ts_failpoint_set("fsync:EIO:walrus.control.tmp"), 0);
	int rc = wal_control_write(dir, &fresh);
	ck_assert_int_eq(rc, WALRUS_EIO);
	assert_msg_has("walrus.control.tmp");
	ck_assert_uint_eq(ts_failpoint_hits(), 1);
	ts_failpoint_set(NULL);
	ck_assert_int_eq(wal_control_read(dir, &got), 0);
	assert_same(&old, &got);
	/* A failed directory fsync is reported too (the caller PANICs on it). */
	ck_assert_int_eq(ts_failpoint_set("fsync_dir:EIO"), 0);
	ck_assert_int_ne(wal_control_write(dir, &fresh), 0);
	ts_failpoint_set(NULL);
}
END_TEST

START_TEST(bad_crc)
{
	wal_control c = sample(0x2000000), got;
	ck_assert_int_eq(wal_control_write(dir, &c), 0);
	tu_flip_bit(path, 40, 2); /* inside checkpoint_lsn */
	ck_assert_int_eq(wal_control_read(dir, &got), WALRUS_ECORRUPT);
	assert_msg_has("incorrect checksum in control file");
	assert_msg_has(path);
}
END_TEST

START_TEST(bad_magic)
{
	wal_control c = sample(0x2000000), got;
	ck_assert_int_eq(wal_control_write(dir, &c), 0);
	tu_flip_bit(path, 0, 5);
	ck_assert_int_eq(wal_control_read(dir, &got), WALRUS_ECORRUPT);
	assert_msg_has("bad magic number");
	assert_msg_has(path);
	/* Garbage of the right size is damage too. */
	char junk[512];
	memset(junk, 'x', sizeof(junk));
	ck_assert_int_eq(tu_write_file(path, junk, sizeof(junk)), 0);
	ck_assert_int_eq(wal_control_read(dir, &got), WALRUS_ECORRUPT);
}
END_TEST

/* Rewrites the file with @version (and a matching CRC): made by another release. */
static void set_version(uint32_t version)
{
	wal_control c;
	int fd = open(path, O_RDWR);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(pread(fd, &c, sizeof(c), 0), (ssize_t)sizeof(c));
	c.version = version;
	c.crc = crc32c(0, &c, offsetof(wal_control, crc));
	ck_assert_int_eq(pwrite(fd, &c, sizeof(c), 0), (ssize_t)sizeof(c));
	close(fd);
}

START_TEST(wrong_version)
{
	wal_control c = sample(0x2000000), got;
	ck_assert_int_eq(wal_control_write(dir, &c), 0);
	set_version(WAL_CONTROL_VERSION + 6);
	ck_assert_int_eq(wal_control_read(dir, &got), WALRUS_EVERSION);
	char want[64];
	snprintf(want, sizeof(want), "version %u", WAL_CONTROL_VERSION + 6);
	assert_msg_has(want);
	snprintf(want, sizeof(want), "version %u", WAL_CONTROL_VERSION);
	assert_msg_has(want);
}
END_TEST

START_TEST(missing)
{
	wal_control got;
	ck_assert_int_eq(wal_control_read(dir, &got), WALRUS_ENOENT);
	assert_msg_has("is missing");
	assert_msg_has(path);
}
END_TEST

START_TEST(truncated)
{
	wal_control c = sample(0x2000000), got;
	ck_assert_int_eq(wal_control_write(dir, &c), 0);
	ck_assert_int_eq(truncate(path, 100), 0);
	ck_assert_int_eq(wal_control_read(dir, &got), WALRUS_ECORRUPT);
	assert_msg_has(path);
	ck_assert_int_eq(truncate(path, 0), 0);
	ck_assert_int_eq(wal_control_read(dir, &got), WALRUS_ECORRUPT);
	/* Longer than 512 bytes is not a control file of ours either. */
	ck_assert_int_eq(truncate(path, 1024), 0);
	ck_assert_int_eq(wal_control_read(dir, &got), WALRUS_ECORRUPT);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("wal-control");
	TCase *tc = tcase_create("control");
	tcase_add_checked_fixture(tc, setup, NULL);
	tcase_add_test(tc, round_trip);
	tcase_add_test(tc, atomic_replace);
	tcase_add_test(tc, bad_crc);
	tcase_add_test(tc, bad_magic);
	tcase_add_test(tc, wrong_version);
	tcase_add_test(tc, missing);
	tcase_add_test(tc, truncated);
	suite_add_tcase(s, tc);
	return tu_run(s);
}
