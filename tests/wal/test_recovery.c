/*
 * test_recovery.c - bootstrap and crash recovery on the storage layer: the
 * first checkpoint, replay of RM_TEST records (with and without full-page
 * images) into data pages, idempotent replay, and the end of WAL told
 * apart from damage: a torn last record ends the WAL, while a bad record in
 * the middle, a missing checkpoint, a missing segment or one of the wrong
 * size are errors that name the LSN or the file.
 *
 * WAL is written with the file writer (no shared memory), continuing the
 * stream where recovery says it ends.  A model of every page is kept in
 * memory and compared with what recovery wrote.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "testutil.h"
#include "wal/wal.h"

#define SEG            (64 * 1024) /* small WAL and data segments: records cross them often */
#define TEST_SET_BYTES 0x10
#define NREL           2
#define NBLK           6
#define CMP_FROM       12 /* page bytes after the LSN and checksum, which the model does not track */

static const char *dir;
static char waldir[4096];
static wr_options o;

/* The expected pages of relations REL_A and REL_B, and the end LSN of their last change. */
static const wr_relid rels[NREL] = {5, 7};
static char model[NREL][NBLK][WR_PAGE_SIZE];
static wr_lsn model_lsn[NREL][NBLK];

/* The stream being appended to. */
static wal_file_writer *fw;
static wal_assembled asm_buf;
static wr_lsn last_start, last_end;
static uint64_t written; /* records appended */

static void setup(void)
{
	dir = tu_tmpdir("walrus-recovery");
	wr_log_set_stderr(WR_PANIC + 1);
	ck_assert_int_eq(fdc_init(100), 0);
	wr_opts_defaults(&o);
	o.wal_segment_size = SEG;
	o.data_segment_size = SEG;
	snprintf(waldir, sizeof(waldir), "%s/wal", dir);
	ck_assert_int_eq(smgr_init(dir, o.data_segment_size), 0);
	wal_redo_set_pages(NULL);
	memset(model, 0, sizeof(model));
	memset(model_lsn, 0, sizeof(model_lsn));
	written = 0;
}

static void assert_msg_has(const char *what)
{
	ck_assert_msg(strstr(walrus_errmsg(), what) != NULL, "message \"%s\" lacks \"%s\"",
	              walrus_errmsg(), what);
}

static const char *lsn_str(wr_lsn lsn)
{
	static char buf[4][32];
	static int next;
	char *b = buf[next++ % 4];
	snprintf(b, 32, WAL_LSN_FMT, WAL_LSN_ARGS(lsn));
	return b;
}

static const char *seg_path(wr_lsn lsn)
{
	static char buf[4][4096];
	static int next;
	char *b = buf[next++ % 4];
	wal_segment_path(waldir, SEG, lsn, b, 4096);
	return b;
}

static wal_control control(void)
{
	wal_control c;
	ck_assert_int_eq(wal_control_read(dir, &c), 0);
	return c;
}

static void recover_ok(wal_recovery_result *res)
{
	int rc = wal_recover(dir, &o, res);
	ck_assert_msg(rc == 0, "wal_recover: %d %s", rc, walrus_errmsg());
}

/* Bootstraps, recovers, and opens the writer where the WAL ends. */
static void start_stream(void)
{
	static wal_recovery_result res;
	ck_assert_int_eq(wal_bootstrap(dir, &o), 0);
	recover_ok(&res);
	ck_assert_int_eq(wal_fw_open(waldir, SEG, control().sysid, res.end, res.last_lsn, &fw), 0);
	last_start = res.last_lsn;
	last_end = res.end;
}

static void end_stream(void)
{
	ck_assert_int_eq(wal_fw_flush(fw, true), 0);
	wal_fw_close(fw);
	fw = NULL;
	free(asm_buf.buf);
	memset(&asm_buf, 0, sizeof(asm_buf));
}

static void append(uint8_t rmid, uint8_t info, bool fpw)
{
	ck_assert_int_eq(wal_assemble(&asm_buf, rmid, info, control().redo_lsn, fpw, 0), 0);
	ck_assert_int_eq(wal_fw_append(fw, &asm_buf, &last_start, &last_end), 0);
	written++;
}

/*
 * Appends a TEST "set bytes" record for block @blk of relation number @ri,
 * and applies it to the model.  With @fpi, the record carries the image of
 * the page after the change (as a first change after a checkpoint would).
 */
static void set_bytes(int ri, wr_blkno blk, uint16_t off, uint16_t len, int fill, bool fpi)
{
	static char main_data[4 + WR_PAGE_SIZE];
	char *page = model[ri][blk];
	if (page_is_new(page))
		page_init(page, WR_PAGE_SIZE - WR_PAGE_HEADER_SIZE, 0);
	memset(page + off, fill, len);
	memcpy(main_data, &off, 2);
	memcpy(main_data + 2, &len, 2);
	memset(main_data + 4, fill, len);
	wal_begin();
	wal_register_block(0, rels[ri], blk, page, 0);
	wal_register_data(main_data, 4u + len);
	append(RM_TEST, TEST_SET_BYTES, fpi);
	model_lsn[ri][blk] = last_end;
}

static void read_page(int ri, wr_blkno blk, char *page)
{
	smgr_rel *r;
	ck_assert_int_eq(smgr_open(rels[ri], &r), 0);
	int rc = smgr_read(r, blk, page);
	ck_assert_msg(rc == 0, "smgr_read: %s", walrus_errmsg());
}

static void check_pages(void)
{
	static char page[WR_PAGE_SIZE];
	for (int ri = 0; ri < NREL; ri++) {
		for (wr_blkno b = 0; b < NBLK; b++) {
			if (model_lsn[ri][b] == 0)
				continue;
			read_page(ri, b, page);
			ck_assert_msg(memcmp(page + CMP_FROM, model[ri][b] + CMP_FROM,
			                     WR_PAGE_SIZE - CMP_FROM) == 0,
			              "rel %u blk %u differs", rels[ri], b);
			ck_assert_uint_eq(page_get_lsn(page), model_lsn[ri][b]);
		}
	}
}

/* A mix that crosses WAL pages and segments: big and small changes, some with images. */
static void write_workload(int rounds)
{
	for (int i = 0; i < rounds; i++) {
		int ri = i % NREL;
		wr_blkno blk = (wr_blkno)((i * 7) % NBLK);
		uint16_t len = (uint16_t)(i % 3 == 0 ? 3000 : 17 + i);
		uint16_t off = (uint16_t)(WR_PAGE_HEADER_SIZE + (i * 131) % (WR_PAGE_SIZE - 3100));
		/* Relation 7 never gets images: its replay is the pure LSN comparison. */
		set_bytes(ri, blk, off, len, 'a' + i % 26, ri == 0 && i % 5 == 0);
	}
}

/* ---------------------------------------------------------------- bootstrap */

START_TEST(bootstrap_then_recover)
{
	wal_recovery_result *res = malloc(sizeof(*res));
	ck_assert_int_eq(wal_bootstrap(dir, &o), 0);
	wal_control c = control();
	ck_assert_uint_eq(c.state, WAL_DB_SHUTDOWN);
	ck_assert_uint_eq(c.checkpoint_lsn, SEG + WAL_LONG_PHD);
	ck_assert_uint_eq(c.redo_lsn, c.checkpoint_lsn);
	ck_assert_uint_eq(c.next_relid, 1);
	ck_assert_uint_eq(c.wal_seg_size, SEG);
	ck_assert_uint_eq(c.data_seg_size, SEG);
	ck_assert_uint_ne(c.sysid, 0);
	struct stat st;
	ck_assert_int_eq(stat(seg_path(SEG), &st), 0);
	ck_assert_int_eq(st.st_size, SEG);

	/* Never over an existing instance. */
	ck_assert_int_eq(wal_bootstrap(dir, &o), WALRUS_EINVAL);
	assert_msg_has("already exists");

	recover_ok(res);
	ck_assert_uint_eq(res->records, 1);
	ck_assert_uint_eq(res->last_lsn, c.checkpoint_lsn);
	ck_assert_uint_eq(res->last_redo, c.redo_lsn);
	ck_assert_uint_eq(res->next_relid, 1);

	/* end is the checkpoint record's end, and last_page holds the page up to it. */
	wal_reader *r;
	wal_decoded *rec;
	ck_assert_int_eq(wal_reader_open(waldir, SEG, c.sysid, &r), 0);
	ck_assert_int_eq(wal_read_record(r, c.checkpoint_lsn, &rec), 0);
	ck_assert_uint_eq(res->end, rec->end);
	uint32_t in_page = (uint32_t)(c.checkpoint_lsn % WAL_PAGE_SIZE);
	ck_assert_int_eq(memcmp(res->last_page + in_page, rec->raw, rec->hdr.tot_len), 0);
	wal_reader_close(r);
	wal_long_page_header h;
	memcpy(&h, res->last_page, sizeof(h));
	ck_assert_uint_eq(h.std.magic, WAL_PAGE_MAGIC);
	ck_assert_uint_eq(h.std.pageaddr, SEG);
	ck_assert_uint_eq(h.sysid, c.sysid);
	for (uint32_t i = (uint32_t)(res->end % WAL_PAGE_SIZE); i < WAL_PAGE_SIZE; i++)
		ck_assert_int_eq(res->last_page[i], 0);
	free(res);
}
END_TEST

/* ---------------------------------------------------------------- replay */

static int base7_writes;
static void count_base7(const char *path, off_t off, size_t len, const void *buf)
{
	(void)off;
	(void)len;
	(void)buf;
	if (strstr(path, "/base/7") != NULL)
		base7_writes++;
}

START_TEST(replay_test_records)
{
	wal_recovery_result *res = malloc(sizeof(*res));
	start_stream();
	write_workload(100);
	wr_lsn first_end = last_end;
	end_stream();
	ck_assert_uint_gt(last_end, 3 * SEG); /* crossed segments */

	recover_ok(res);
	ck_assert_uint_eq(res->records, written + 1); /* and the checkpoint */
	ck_assert_uint_eq(res->end, first_end);
	ck_assert_uint_eq(res->last_lsn, last_start);
	check_pages();

	/* A later change the WAL does not know (LSN past the end): replay must skip the page. */
	static char page[WR_PAGE_SIZE];
	smgr_rel *r;
	read_page(1, 1, page);
	page[WR_PAGE_SIZE / 2] ^= 0x5a;
	page_set_lsn(page, res->end + 4096);
	ck_assert_int_eq(smgr_open(rels[1], &r), 0);
	ck_assert_int_eq(smgr_write(r, 1, page), 0);

	/* Again: idempotent, and relation 7 (no images) is not written at all. */
	base7_writes = 0;
	fdc_set_write_observer(count_base7);
	recover_ok(res);
	fdc_set_write_observer(NULL);
	ck_assert_int_eq(base7_writes, 0);
	ck_assert_uint_eq(res->records, written + 1);
	ck_assert_uint_eq(res->end, first_end);
	static char again[WR_PAGE_SIZE];
	read_page(1, 1, again);
	ck_assert_int_eq(memcmp(page, again, WR_PAGE_SIZE), 0);
	model[1][1][WR_PAGE_SIZE / 2] ^= 0x5a;
	model_lsn[1][1] = res->end + 4096;
	check_pages();
	free(res);
}
END_TEST

/* A torn page on disk is repaired by the image, never read. */
START_TEST(image_repairs_torn_page)
{
	wal_recovery_result *res = malloc(sizeof(*res));
	start_stream();
	set_bytes(0, 1, 100, 50, 'x', true);
	set_bytes(0, 1, 300, 50, 'y', false);
	end_stream();
	recover_ok(res);
	check_pages();
	char path[4096];
	smgr_segment_path(rels[0], 0, path, sizeof(path));
	tu_flip_bit(path, WR_PAGE_SIZE + 4000, 1); /* block 1: now fails its checksum */
	recover_ok(res);
	check_pages();
	free(res);
}
END_TEST

/* ---------------------------------------------------------------- end of WAL and damage */

/* Overwrites one byte of the WAL stream at @lsn (inside a record, not a page header). */
static void damage_at(wr_lsn lsn)
{
	while (lsn % WAL_PAGE_SIZE < WAL_LONG_PHD)
		lsn += WAL_LONG_PHD; /* not a page header: the record's own bytes */
	int fd = open(seg_path(lsn), O_RDWR);
	ck_assert_int_ge(fd, 0);
	unsigned char b;
	ck_assert_int_eq(pread(fd, &b, 1, (off_t)(lsn % SEG)), 1);
	b ^= 0xff;
	ck_assert_int_eq(pwrite(fd, &b, 1, (off_t)(lsn % SEG)), 1);
	close(fd);
}

START_TEST(torn_last_record)
{
	wal_recovery_result *res = malloc(sizeof(*res));
	start_stream();
	write_workload(10);
	wr_lsn keep_end = last_end, keep_start = last_start;
	char before[WR_PAGE_SIZE];
	memcpy(before, model[1][3], WR_PAGE_SIZE);
	wr_lsn before_lsn = model_lsn[1][3];
	set_bytes(1, 3, 200, 2000, 'q', false);
	wr_lsn torn = last_start;
	end_stream();
	damage_at(torn + WAL_RECORD_HEADER + 1500); /* in the bytes of the last record */
	memcpy(model[1][3], before, WR_PAGE_SIZE);
	model_lsn[1][3] = before_lsn;

	recover_ok(res);
	ck_assert_uint_eq(res->end, keep_end);
	ck_assert_uint_eq(res->last_lsn, keep_start);
	ck_assert_uint_eq(res->records, written); /* the checkpoint, not the torn one */
	check_pages();
	free(res);
}
END_TEST

START_TEST(damage_in_the_middle)
{
	wal_recovery_result *res = malloc(sizeof(*res));
	start_stream();
	write_workload(5);
	set_bytes(0, 2, 1000, 100, 'm', false);
	wr_lsn bad = last_start;
	write_workload(2);
	/* Flushed: the pages written from now on say so. */
	ck_assert_int_eq(wal_fw_flush(fw, true), 0);
	write_workload(20);
	end_stream();
	damage_at(bad + WAL_RECORD_HEADER + 60);
	ck_assert_int_eq(wal_recover(dir, &o, res), WALRUS_ECORRUPT);
	assert_msg_has(lsn_str(bad));
	assert_msg_has("damaged but was flushed");
	free(res);
}
END_TEST

/*
 * A power cut in the middle of a flush: the page cache wrote back a later
 * page and not an earlier one, so a record is torn while valid records
 * follow it.  None of them was flushed: the WAL ends at the torn record.
 */
START_TEST(torn_record_before_unflushed_wal)
{
	wal_recovery_result *res = malloc(sizeof(*res));
	start_stream();
	write_workload(3);
	ck_assert_int_eq(wal_fw_flush(fw, true), 0);
	wr_lsn good = last_start, good_end = last_end;
	set_bytes(1, 3, 2000, 50, 'q', false);
	wr_lsn bad = last_start;
	for (int i = 0; i < 6; i++)
		set_bytes(1, 4, (uint16_t)(100 + 10 * i), 30, 'r', false);
	/* Within one segment: leaving one would sync it. */
	ck_assert_uint_eq(bad / SEG, last_end / SEG);
	end_stream(); /* writes and syncs, but the pages were stamped before the sync */
	damage_at(bad + WAL_RECORD_HEADER + 20);
	ck_assert_int_eq(wal_recover(dir, &o, res), 0);
	ck_assert_uint_eq(res->last_lsn, good);
	ck_assert_uint_eq(res->end, good_end);
	free(res);
}
END_TEST

/* A record this walrus cannot replay, whose CRC is right: a newer walrus wrote it. */
START_TEST(unknown_rmgr)
{
	wal_recovery_result *res = malloc(sizeof(*res));
	start_stream();
	write_workload(3);
	char data[8] = "unknown";
	wal_begin();
	wal_register_data(data, sizeof(data));
	append(RM_MAX - 1, 0x10, false);
	wr_lsn bad = last_start;
	end_stream();
	ck_assert_int_eq(wal_recover(dir, &o, res), WALRUS_EVERSION);
	assert_msg_has("resource manager id 15, which walrus " WR_WALRUS_VERSION " does not know");
	assert_msg_has("a newer walrus wrote it");
	assert_msg_has(lsn_str(bad));
	free(res);
}
END_TEST

START_TEST(unknown_record_type)
{
	wal_recovery_result *res = malloc(sizeof(*res));
	start_stream();
	write_workload(3);
	wal_begin();
	append(RM_XLOG, 0xE0, false);
	wr_lsn bad = last_start;
	end_stream();
	ck_assert_int_eq(wal_recover(dir, &o, res), WALRUS_EVERSION);
	assert_msg_has("XLOG record type 0xE0");
	assert_msg_has("a newer walrus wrote it");
	assert_msg_has(lsn_str(bad));
	free(res);
}
END_TEST

/*
 * Rewrites the header of the WAL page at @page: its magic and address.  No
 * checksum covers a page header (a record's CRC covers its own bytes only).
 */
static void rewrite_page_header(wr_lsn page, uint16_t magic, wr_lsn pageaddr)
{
	int fd = open(seg_path(page), O_RDWR);
	ck_assert_int_ge(fd, 0);
	wal_page_header h;
	ck_assert_int_eq(pread(fd, &h, sizeof(h), (off_t)(page % SEG)), (ssize_t)sizeof(h));
	h.magic = magic;
	h.pageaddr = pageaddr;
	ck_assert_int_eq(pwrite(fd, &h, sizeof(h), (off_t)(page % SEG)), (ssize_t)sizeof(h));
	ck_assert_int_eq(close(fd), 0);
}

static void assert_msg_has_format(uint32_t format)
{
	char what[64];
	snprintf(what, sizeof(what), "has WAL format %u, which ", format);
	assert_msg_has(what);
}

/*
 * A page of the stream in a later WAL format (its magic) is refused with
 * WALRUS_EVERSION naming the segment, the position and the format: not
 * taken for the end of WAL (replay would stop early and new WAL overwrite
 * it) nor for damage.  A segment's first page of that format names the
 * walrus that reads it, and the message repeats it.
 */
START_TEST(later_wal_format_refused)
{
	const uint16_t later = WAL_FORMAT_MAGIC(WAL_FORMAT + 1);
	wal_recovery_result *res = malloc(sizeof(*res));
	start_stream();
	write_workload(200);
	end_stream();
	wr_lsn page = 2 * SEG + 3 * WAL_PAGE_SIZE;
	ck_assert_uint_gt(last_end, page + WAL_PAGE_SIZE);
	rewrite_page_header(page, later, page);
	ck_assert_int_eq(wal_recover(dir, &o, res), WALRUS_EVERSION);
	assert_msg_has(seg_path(page));
	assert_msg_has(lsn_str(page));
	assert_msg_has_format(WAL_FORMAT + 1);
	assert_msg_has("needs a walrus newer than this one (walrus " WR_WALRUS_VERSION);

	/* The segment's first page says which walrus reads the format. */
	rewrite_page_header(2 * SEG, later, 2 * SEG);
	int fd = open(seg_path(2 * SEG), O_RDWR);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(pwrite(fd, "9.9.9", 6, WAL_NEEDS_OFF), 6);
	ck_assert_int_eq(close(fd), 0);
	ck_assert_int_eq(wal_recover(dir, &o, res), WALRUS_EVERSION);
	assert_msg_has(lsn_str(2 * SEG));
	assert_msg_has_format(WAL_FORMAT + 1);
	assert_msg_has("needs walrus >= 9.9.9 (this is walrus " WR_WALRUS_VERSION ")");

	/* Read from the later page itself (a standby's or a tool's start), the
	 * reader finds the version on the segment's first page too. */
	wal_reader *r;
	wal_decoded *rec;
	ck_assert_int_eq(wal_reader_open(waldir, SEG, control().sysid, &r), 0);
	ck_assert_int_eq(wal_read_record(r, page + WAL_SHORT_PHD, &rec), WALRUS_EVERSION);
	assert_msg_has(lsn_str(page));
	assert_msg_has("needs walrus >= 9.9.9");
	wal_reader_close(r);
	free(res);
}
END_TEST

/* A later format's page at another address is stale (a recycled segment): it
 * ends the WAL as any stale page does. */
START_TEST(stale_page_of_later_format_ends_wal)
{
	const uint16_t later = WAL_FORMAT_MAGIC(WAL_FORMAT + 1);
	start_stream();
	write_workload(5);
	end_stream();
	wr_lsn page = last_end - last_end % WAL_PAGE_SIZE + WAL_PAGE_SIZE;
	ck_assert_uint_eq(page / SEG,
	                  last_end / SEG); /* a page of the last segment, past its end */
	wal_reader *r;
	wal_decoded *rec;
	ck_assert_int_eq(wal_reader_open(waldir, SEG, control().sysid, &r), 0);
	rewrite_page_header(page, later, page + SEG);
	ck_assert_int_eq(wal_read_record(r, page + WAL_SHORT_PHD, &rec), WALRUS_ENOTFOUND);
	assert_msg_has("unexpected pageaddr");
	rewrite_page_header(page, later, page);
	ck_assert_int_eq(wal_read_record(r, page + WAL_SHORT_PHD, &rec), WALRUS_EVERSION);
	assert_msg_has_format(WAL_FORMAT + 1);
	wal_reader_close(r);
}
END_TEST

START_TEST(missing_checkpoint)
{
	wal_recovery_result *res = malloc(sizeof(*res));
	start_stream();
	write_workload(3);
	wr_lsn test_rec = last_start;
	end_stream();
	wal_control c = control();

	/* Pointing into the middle of a record: nothing valid there. */
	c.checkpoint_lsn = c.redo_lsn = test_rec + 8;
	ck_assert_int_eq(wal_control_write(dir, &c), 0);
	ck_assert_int_eq(wal_recover(dir, &o, res), WALRUS_ECORRUPT);
	assert_msg_has("could not locate a valid checkpoint record");
	assert_msg_has(lsn_str(test_rec + 8));

	/* Pointing at a record that is not a checkpoint. */
	c.checkpoint_lsn = c.redo_lsn = test_rec;
	ck_assert_int_eq(wal_control_write(dir, &c), 0);
	ck_assert_int_eq(wal_recover(dir, &o, res), WALRUS_ECORRUPT);
	assert_msg_has("could not locate a valid checkpoint record");

	/* Past the end of WAL. */
	c.checkpoint_lsn = c.redo_lsn = last_end + 64;
	ck_assert_int_eq(wal_control_write(dir, &c), 0);
	ck_assert_int_eq(wal_recover(dir, &o, res), WALRUS_ECORRUPT);
	assert_msg_has("could not locate a valid checkpoint record");
	free(res);
}
END_TEST

/* An online checkpoint whose redo point is in an earlier segment: recovery replays from there. */
static wr_lsn online_checkpoint(wr_lsn redo, uint64_t next_relid)
{
	wal_checkpoint_rec ck = {.redo = redo, .time_us = 1, .next_relid = next_relid};
	wal_begin();
	wal_register_data(&ck, sizeof(ck));
	append(RM_XLOG, XLOG_CHECKPOINT_ONLINE, false);
	return last_start;
}

START_TEST(checkpoint_after_redo_point)
{
	wal_recovery_result *res = malloc(sizeof(*res));
	start_stream();
	write_workload(2);
	set_bytes(1, 4, 64, 100, 'r', false);
	wr_lsn redo = last_start;
	write_workload(150);
	wr_lsn ckpt = online_checkpoint(redo, 9);
	end_stream();
	ck_assert_uint_ge(ckpt - ckpt % SEG, redo - redo % SEG + 2 * SEG);
	wal_control c = control();
	c.checkpoint_lsn = ckpt;
	c.redo_lsn = redo;
	c.state = WAL_DB_IN_PRODUCTION;
	ck_assert_int_eq(wal_control_write(dir, &c), 0);

	recover_ok(res);
	ck_assert_uint_eq(res->records, 150 + 1 + 1);
	ck_assert_uint_eq(res->next_relid, 9);
	ck_assert_uint_eq(res->last_redo, redo);
	ck_assert_uint_eq(res->last_lsn, ckpt);

	/* The segment between the redo point and the checkpoint disappears: not an end of WAL. */
	ck_assert_int_eq(unlink(seg_path(redo - redo % SEG + SEG)), 0);
	ck_assert_int_eq(wal_recover(dir, &o, res), WALRUS_ECORRUPT);
	assert_msg_has("checkpoint");
	free(res);
}
END_TEST

START_TEST(missing_segment_after_checkpoint)
{
	wal_recovery_result *res = malloc(sizeof(*res));
	start_stream();
	write_workload(200);
	end_stream();
	ck_assert_uint_ge(last_end, 4 * SEG);
	const char *gone = seg_path(2 * SEG);
	ck_assert_int_eq(unlink(gone), 0);
	ck_assert_int_eq(wal_recover(dir, &o, res), WALRUS_ECORRUPT);
	assert_msg_has(gone);
	free(res);
}
END_TEST

START_TEST(segment_of_wrong_size)
{
	wal_recovery_result *res = malloc(sizeof(*res));
	start_stream();
	write_workload(200);
	end_stream();
	const char *bad = seg_path(2 * SEG);
	ck_assert_int_eq(truncate(bad, SEG / 2), 0);
	ck_assert_int_ne(wal_recover(dir, &o, res), 0);
	assert_msg_has(bad);
	free(res);
}
END_TEST

START_TEST(future_segment_of_wrong_size)
{
	wal_recovery_result *res = malloc(sizeof(*res));
	ck_assert_int_eq(wal_bootstrap(dir, &o), 0);
	const char *bad = seg_path(3 * SEG);
	ck_assert_int_eq(tu_write_file(bad, "junk", 4), 0);
	ck_assert_int_eq(wal_recover(dir, &o, res), WALRUS_ECORRUPT);
	assert_msg_has(bad);
	free(res);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("wal-recovery");
	TCase *tc = tcase_create("recovery");
	tcase_add_checked_fixture(tc, setup, NULL);
	tcase_add_test(tc, bootstrap_then_recover);
	tcase_add_test(tc, replay_test_records);
	tcase_add_test(tc, image_repairs_torn_page);
	tcase_add_test(tc, torn_last_record);
	tcase_add_test(tc, damage_in_the_middle);
	tcase_add_test(tc, torn_record_before_unflushed_wal);
	tcase_add_test(tc, unknown_rmgr);
	tcase_add_test(tc, unknown_record_type);
	tcase_add_test(tc, later_wal_format_refused);
	tcase_add_test(tc, stale_page_of_later_format_ends_wal);
	tcase_add_test(tc, missing_checkpoint);
	tcase_add_test(tc, checkpoint_after_redo_point);
	tcase_add_test(tc, missing_segment_after_checkpoint);
	tcase_add_test(tc, segment_of_wrong_size);
	tcase_add_test(tc, future_segment_of_wrong_size);
	suite_add_tcase(s, tc);
	return tu_run(s);
}
