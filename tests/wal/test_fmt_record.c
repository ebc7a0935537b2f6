/*
 * test_fmt_record.c - WAL record assembly and decoding, full-page images,
 * and the position arithmetic: what is assembled decodes to the same parts,
 * images restore pages exactly, and any damaged byte is detected.
 */
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "wal/wal.h"

static wal_assembled asm_buf;
static wal_decoded dec;

static void teardown(void)
{
	free(asm_buf.buf);
	memset(&asm_buf, 0, sizeof(asm_buf));
}

static void fill(void *p, size_t n, unsigned seed)
{
	unsigned char *c = p;
	uint64_t x = 0x9E3779B97F4A7C15ull * (seed + 1);
	for (size_t i = 0; i < n; i++) {
		x ^= x << 13; /* xorshift64: incompressible enough for zstd */
		x ^= x >> 7;
		x ^= x << 17;
		c[i] = (unsigned char)(x >> 32);
	}
}

/* A slotted page with content below lower and above upper, a zero hole between. */
static void make_page(char *page, uint16_t lower, uint16_t upper, wr_lsn lsn, unsigned seed)
{
	fill(page, WR_PAGE_SIZE, seed);
	wr_page_header h = {.lsn = lsn, .lower = lower, .upper = upper, .special = WR_PAGE_SIZE};
	memcpy(page, &h, sizeof(h));
	if (lower < upper && lower >= WR_PAGE_HEADER_SIZE && upper <= WR_PAGE_SIZE)
		memset(page + lower, 0, upper - lower);
}

/* Assembles, finishes with @prev and decodes; asserts success. */
static void round_trip(uint8_t rmid, uint8_t info, wr_lsn redo, bool fpw, int level, wr_lsn prev)
{
	ck_assert_int_eq(wal_assemble(&asm_buf, rmid, info, redo, fpw, level), WALRUS_OK);
	wal_finish_record(&asm_buf, prev);
	int rc = wal_decode(asm_buf.buf, asm_buf.len, 0x1000020, &dec);
	ck_assert_msg(rc == WALRUS_OK, "decode: %s", walrus_errmsg());
	ck_assert_uint_eq(dec.hdr.tot_len, asm_buf.len);
	ck_assert_uint_eq(dec.hdr.rmid, rmid);
	ck_assert_uint_eq(dec.hdr.info, info);
	ck_assert_uint_eq(dec.hdr.prev, prev);
	ck_assert_uint_eq(dec.lsn, 0x1000020);
}

START_TEST(test_no_blocks)
{
	wal_begin();
	round_trip(RM_TEST, 0x42, 0, true, 0, 0x12345678);
	ck_assert_int_eq(dec.nblocks, 0);
	ck_assert_uint_eq(dec.main_len, 0);
	ck_assert_ptr_null(dec.main_data);
	ck_assert_uint_eq(asm_buf.len, WAL_RECORD_HEADER + 5);
	ck_assert_uint_eq(asm_buf.fpi_count, 0);
}
END_TEST

START_TEST(test_blocks_and_data)
{
	char d0[10], d1[300], d31[7], main1[33], main2[1000];
	fill(d0, sizeof(d0), 1);
	fill(d1, sizeof(d1), 2);
	fill(d31, sizeof(d31), 3);
	fill(main1, sizeof(main1), 4);
	fill(main2, sizeof(main2), 5);
	wal_begin();
	/* Registered out of order: assembly sorts by id. */
	wal_register_block(31, 9, 99, NULL, 0);
	wal_register_block(0, 1, 7, NULL, WAL_BLK_WILL_INIT);
	wal_register_block(3, 2, 8, NULL, 0);
	wal_register_block_data(0, d0, 4);
	wal_register_data(main1, sizeof(main1));
	wal_register_block_data(31, d31, sizeof(d31));
	wal_register_block_data(0, d0 + 4, 6);
	wal_register_data(main2, sizeof(main2));
	round_trip(RM_KV, 1, 100, true, 0, 0);
	ck_assert_int_eq(dec.nblocks, 3);
	ck_assert_uint_eq(dec.blocks[0].id, 0);
	ck_assert_uint_eq(dec.blocks[0].rel, 1);
	ck_assert_uint_eq(dec.blocks[0].blkno, 7);
	ck_assert_uint_eq(dec.blocks[0].flags, WAL_BLK_WILL_INIT | WAL_BLK_HAS_DATA);
	ck_assert_uint_eq(dec.blocks[0].data_len, 10);
	ck_assert_mem_eq(dec.blocks[0].data, d0, 10);
	ck_assert_ptr_null(dec.blocks[0].image);
	ck_assert_uint_eq(dec.blocks[1].id, 3);
	ck_assert_uint_eq(dec.blocks[1].data_len, 0);
	ck_assert_ptr_null(dec.blocks[1].data);
	ck_assert_uint_eq(dec.blocks[1].flags, 0);
	ck_assert_uint_eq(dec.blocks[2].id, 31);
	ck_assert_uint_eq(dec.blocks[2].rel, 9);
	ck_assert_uint_eq(dec.blocks[2].blkno, 99);
	ck_assert_mem_eq(dec.blocks[2].data, d31, sizeof(d31));
	ck_assert_uint_eq(dec.main_len, sizeof(main1) + sizeof(main2));
	ck_assert_mem_eq(dec.main_data, main1, sizeof(main1));
	ck_assert_mem_eq(dec.main_data + sizeof(main1), main2, sizeof(main2));
	(void)d1;
}
END_TEST

/* Decodes the image of block 0 of dec and compares with @page. */
static void check_image(const char *page)
{
	char out[WR_PAGE_SIZE];
	ck_assert_ptr_nonnull(dec.blocks[0].image);
	int rc = wal_fpi_decode(dec.blocks[0].image, &dec.blocks[0].ih, dec.blocks[0].flags, out);
	ck_assert_msg(rc == WALRUS_OK, "fpi decode: %s", walrus_errmsg());
	ck_assert_mem_eq(out, page, WR_PAGE_SIZE);
}

static void fpi_case(const char *page, int level, bool want_hole, bool want_zstd)
{
	wal_begin();
	wal_register_block(0, 5, 6, page, 0);
	round_trip(RM_KV, 2, page_get_lsn(page), true, level, 77);
	ck_assert_int_eq(dec.nblocks, 1);
	uint8_t f = dec.blocks[0].flags;
	ck_assert(f & WAL_BLK_HAS_IMAGE);
	ck_assert_int_eq(!!(f & WAL_BLK_IMAGE_HOLE), want_hole);
	ck_assert_int_eq(!!(f & WAL_BLK_IMAGE_ZSTD), want_zstd);
	ck_assert_uint_eq(asm_buf.fpi_count, 1);
	ck_assert_uint_eq(asm_buf.fpi_bytes_raw, WR_PAGE_SIZE);
	ck_assert_uint_eq(asm_buf.fpi_bytes_stored, dec.blocks[0].ih.length);
	check_image(page);
}

START_TEST(test_fpi_hole)
{
	static char page[WR_PAGE_SIZE];
	make_page(page, 200, WR_PAGE_SIZE - 1192, 50, 11);
	fpi_case(page, 0, true, false);
	ck_assert_uint_eq(dec.blocks[0].ih.hole_off, 200);
	ck_assert_uint_eq(dec.blocks[0].ih.hole_len, WR_PAGE_SIZE - 1392);
	ck_assert_uint_eq(dec.blocks[0].ih.length, 1392);
	/* Pseudo-random content does not compress: stored as is. */
	fpi_case(page, 3, true, false);
	/* Compressible content does. */
	memset(page + WR_PAGE_HEADER_SIZE, 'x', 200 - WR_PAGE_HEADER_SIZE);
	memset(page + WR_PAGE_SIZE - 1192, 'y', 1192);
	fpi_case(page, 3, true, true);
	ck_assert_uint_lt(dec.blocks[0].ih.length, 200);
}
END_TEST

START_TEST(test_fpi_no_hole)
{
	static char page[WR_PAGE_SIZE];
	/* lower == upper: a full page, no hole. */
	make_page(page, WR_PAGE_SIZE / 2 - 96, WR_PAGE_SIZE / 2 - 96, 10, 12);
	fpi_case(page, 0, false, false);
	ck_assert_uint_eq(dec.blocks[0].ih.length, WR_PAGE_SIZE);
	/* An insane header (lower > upper, upper past the page) has no hole either. */
	make_page(page, WR_PAGE_SIZE / 2 + 904, WR_PAGE_SIZE / 2 - 96, 10, 13);
	fpi_case(page, 3, false, false);
	make_page(page, 100, WR_PAGE_SIZE + 808, 10, 14);
	fpi_case(page, 0, false, false);
	make_page(page, 10, WR_PAGE_SIZE / 2 - 96, 10, 15);
	fpi_case(page, 0, false, false);
	/* A new (all-zero) page compresses to almost nothing. */
	memset(page, 0, sizeof(page));
	fpi_case(page, 1, false, true);
	ck_assert_uint_lt(dec.blocks[0].ih.length, 100);
	/* An empty slotted page: everything but the header is hole. */
	make_page(page, 24, WR_PAGE_SIZE, 10, 16);
	fpi_case(page, 0, true, false);
	ck_assert_uint_eq(dec.blocks[0].ih.length, WR_PAGE_HEADER_SIZE);
}
END_TEST

START_TEST(test_fpi_decision)
{
	static char page[WR_PAGE_SIZE];
	make_page(page, 100, WR_PAGE_SIZE - 192, 500, 17);
	wal_begin();
	wal_register_block(0, 1, 1, page, 0);
	/* page LSN > redo: changed since the checkpoint, no image. */
	round_trip(RM_KV, 0, 499, true, 0, 0);
	ck_assert_ptr_null(dec.blocks[0].image);
	/* page LSN == redo: first change since, image. */
	round_trip(RM_KV, 0, 500, true, 0, 0);
	ck_assert_ptr_nonnull(dec.blocks[0].image);
	/* fpw off: none. */
	round_trip(RM_KV, 0, 600, false, 0, 0);
	ck_assert_ptr_null(dec.blocks[0].image);
	ck_assert_uint_eq(asm_buf.fpi_count, 0);
	/* Forced by the caller, whatever the LSNs. */
	wal_begin();
	wal_register_block(0, 1, 1, page, WAL_BLK_HAS_IMAGE);
	round_trip(RM_XLOG, XLOG_FPI, 0, false, 0, 0);
	check_image(page);
	/* A forced image without a page is a caller error. */
	wal_begin();
	wal_register_block(0, 1, 1, NULL, WAL_BLK_HAS_IMAGE);
	ck_assert_int_eq(wal_assemble(&asm_buf, RM_KV, 0, 0, true, 0), WALRUS_EINVAL);
}
END_TEST

START_TEST(test_many_chunks)
{
	static char data[200 * 100];
	fill(data, sizeof(data), 21);
	wal_begin();
	size_t off = 0;
	for (int i = 0; i < 200; i++) {
		size_t n = (size_t)(i % 7) * 13 + 1;
		wal_register_data(data + off, n);
		off += n;
		if (i % 3 == 0) {
			wal_register_data(data, 0); /* empty chunks are fine */
		}
	}
	wal_register_block(2, 1, 1, NULL, 0);
	for (int i = 0; i < 100; i++)
		wal_register_block_data(2, data + i, 1);
	round_trip(RM_TEST, 0, 0, false, 0, 0);
	ck_assert_uint_eq(dec.main_len, off);
	ck_assert_mem_eq(dec.main_data, data, off);
	ck_assert_uint_eq(dec.blocks[0].data_len, 100);
	ck_assert_mem_eq(dec.blocks[0].data, data, 100);
}
END_TEST

START_TEST(test_big_record)
{
	size_t n = 64u << 20;
	char *big = malloc(n);
	ck_assert_ptr_nonnull(big);
	fill(big, n, 31);
	wal_begin();
	wal_register_data(big, n / 2);
	wal_register_data(big + n / 2, n / 2);
	round_trip(RM_TEST, 0, 0, false, 0, 0);
	ck_assert_uint_eq(dec.main_len, n);
	ck_assert(memcmp(dec.main_data, big, n) == 0);
	free(big);
}
END_TEST

START_TEST(test_limits)
{
	static char small[70000];
	/* Over the record limit: lengths are checked before any byte is read. */
	wal_begin();
	wal_register_data(small, WAL_MAX_RECORD - WAL_RECORD_HEADER - 5);
	wal_register_data(small, 1);
	ck_assert_int_eq(wal_assemble(&asm_buf, RM_TEST, 0, 0, false, 0), WALRUS_ETOOBIG);
	/* Block data is limited by its 16-bit length. */
	wal_begin();
	wal_register_block(0, 1, 1, NULL, 0);
	wal_register_block_data(0, small, 65535);
	ck_assert_int_eq(wal_assemble(&asm_buf, RM_TEST, 0, 0, false, 0), WALRUS_OK);
	wal_register_block_data(0, small, 1);
	ck_assert_int_eq(wal_assemble(&asm_buf, RM_TEST, 0, 0, false, 0), WALRUS_EINVAL);
	/* Misuse of the registration. */
	wal_begin();
	wal_register_block(1, 1, 1, NULL, 0);
	wal_register_block(1, 1, 2, NULL, 0);
	ck_assert_int_eq(wal_assemble(&asm_buf, RM_TEST, 0, 0, false, 0), WALRUS_EINVAL);
	wal_begin();
	wal_register_block(WAL_MAX_BLOCKS, 1, 1, NULL, 0);
	ck_assert_int_eq(wal_assemble(&asm_buf, RM_TEST, 0, 0, false, 0), WALRUS_EINVAL);
	wal_begin();
	wal_register_block_data(4, small, 1);
	ck_assert_int_eq(wal_assemble(&asm_buf, RM_TEST, 0, 0, false, 0), WALRUS_EINVAL);
	/* wal_begin forgets the misuse. */
	wal_begin();
	ck_assert_int_eq(wal_assemble(&asm_buf, RM_TEST, 0, 0, false, 0), WALRUS_OK);
}
END_TEST

/* A record with a bit of everything, for the damage tests. */
static void rich_record(void)
{
	static char page[WR_PAGE_SIZE], d[100], m[500];
	make_page(page, 300, WR_PAGE_SIZE - 2192, 5, 41);
	fill(d, sizeof(d), 42);
	fill(m, sizeof(m), 43);
	wal_begin();
	wal_register_block(0, 3, 4, page, 0);
	wal_register_block_data(0, d, sizeof(d));
	wal_register_block(5, 3, 5, NULL, 0);
	wal_register_data(m, sizeof(m));
	round_trip(RM_KV, 9, 10, true, 0, 4242);
}

START_TEST(test_every_byte_checked)
{
	rich_record();
	for (uint32_t i = 0; i < asm_buf.len; i++) {
		for (int bit = 0; bit < 8; bit += 3) {
			asm_buf.buf[i] ^= (char)(1 << bit);
			ck_assert_int_eq(wal_decode(asm_buf.buf, asm_buf.len, 64, &dec),
			                 WALRUS_ECORRUPT);
			asm_buf.buf[i] ^= (char)(1 << bit);
		}
	}
	ck_assert_int_eq(wal_decode(asm_buf.buf, asm_buf.len, 64, &dec), WALRUS_OK);
	/* A length that does not match what was read. */
	ck_assert_int_eq(wal_decode(asm_buf.buf, asm_buf.len - 1, 64, &dec), WALRUS_ECORRUPT);
	ck_assert_int_eq(wal_decode(asm_buf.buf, 10, 64, &dec), WALRUS_ECORRUPT);
}
END_TEST

/* Re-stamps the CRC after a deliberate change, so only the structure is wrong. */
static void restamp(void)
{
	wal_record h;
	memcpy(&h, asm_buf.buf, sizeof(h));
	asm_buf.payload_crc =
	    crc32c(0, asm_buf.buf + WAL_RECORD_HEADER, h.tot_len - WAL_RECORD_HEADER);
	wal_finish_record(&asm_buf, h.prev);
}

static void expect_structure_error(const char *what)
{
	restamp();
	int rc = wal_decode(asm_buf.buf, asm_buf.len, 64, &dec);
	ck_assert_msg(rc == WALRUS_ECORRUPT, "%s: decode returned %d", what, rc);
	ck_assert_msg(strstr(walrus_errmsg(), "checksum") == NULL, "%s: %s", what, walrus_errmsg());
}

START_TEST(test_structure_checked)
{
	/* Layout: header 24, block 0 (12 + image header 8), block 5 (12), main id+len (5). */
	const uint32_t b0 = WAL_RECORD_HEADER, ih = b0 + 12, b5 = ih + 8, mh = b5 + 12;
	rich_record();
	asm_buf.buf[b5] = 0; /* block id not increasing */
	expect_structure_error("block order");
	rich_record();
	asm_buf.buf[b5] = WAL_MAX_BLOCKS;
	expect_structure_error("block id range");
	rich_record();
	asm_buf.buf[b0 + 2] = (char)0xff; /* block data length overruns */
	asm_buf.buf[b0 + 3] = (char)0xff;
	expect_structure_error("data length");
	rich_record();
	uint16_t bad_len = WR_PAGE_SIZE + 1;
	memcpy(asm_buf.buf + ih, &bad_len, 2);
	expect_structure_error("image length");
	rich_record();
	uint16_t hole_off = WR_PAGE_SIZE - 192;
	memcpy(asm_buf.buf + ih + 2, &hole_off, 2); /* hole past the page end */
	expect_structure_error("hole");
	rich_record();
	asm_buf.buf[b5 + 1] = WAL_BLK_HAS_DATA; /* says data, has none */
	expect_structure_error("flags");
	rich_record();
	uint32_t main_len = 499;
	memcpy(asm_buf.buf + mh + 1, &main_len, 4); /* one byte left over */
	expect_structure_error("left over");
	rich_record();
	main_len = 501;
	memcpy(asm_buf.buf + mh + 1, &main_len, 4);
	expect_structure_error("main data overrun");
	rich_record();
	asm_buf.buf[mh] = 7; /* main data header missing: parsed as a block */
	expect_structure_error("main header");
}
END_TEST

START_TEST(test_fpi_decode_damage)
{
	static char page[WR_PAGE_SIZE], img[WR_PAGE_SIZE], out[WR_PAGE_SIZE];
	make_page(page, 100, 200, 1, 51);
	memset(page + 200, 'z', WR_PAGE_SIZE - 200);
	wal_image_header h;
	uint8_t f = wal_fpi_encode(page, 3, img, &h);
	ck_assert(f & WAL_BLK_IMAGE_ZSTD);
	ck_assert_int_eq(wal_fpi_decode(img, &h, f, out), WALRUS_OK);
	ck_assert_mem_eq(out, page, WR_PAGE_SIZE);
	/* A compressed image that decodes to the wrong size. */
	wal_image_header bad = h;
	bad.hole_len = 99;
	ck_assert_int_eq(wal_fpi_decode(img, &bad, f, out), WALRUS_ECORRUPT);
	/* Garbage instead of a zstd frame. */
	char junk[64];
	fill(junk, sizeof(junk), 52);
	bad = h;
	bad.length = sizeof(junk);
	ck_assert_int_eq(wal_fpi_decode(junk, &bad, f, out), WALRUS_ECORRUPT);
	/* An uncompressed image whose length does not match its hole. */
	f = wal_fpi_encode(page, 0, img, &h);
	bad = h;
	bad.length--;
	ck_assert_int_eq(wal_fpi_decode(img, &bad, f, out), WALRUS_ECORRUPT);
	bad = h;
	bad.hole_off = WR_PAGE_SIZE - 92;
	ck_assert_int_eq(wal_fpi_decode(img, &bad, f, out), WALRUS_ECORRUPT);
}
END_TEST

/* The position after @len record bytes, one byte at a time. */
static wr_lsn naive_advance(wr_lsn lsn, uint64_t len, uint64_t seg)
{
	for (uint64_t i = 0; i < len; i++) {
		if (lsn % WAL_PAGE_SIZE == 0)
			lsn += lsn % seg == 0 ? WAL_LONG_PHD : WAL_SHORT_PHD;
		lsn++;
	}
	return lsn;
}

START_TEST(test_lsn_arithmetic)
{
	const uint64_t seg = 65536;
	ck_assert_uint_eq(wal_page_header_size(seg, seg), WAL_LONG_PHD);
	ck_assert_uint_eq(wal_page_header_size(seg + 100, seg), WAL_LONG_PHD);
	ck_assert_uint_eq(wal_page_header_size(seg + WAL_PAGE_SIZE, seg), WAL_SHORT_PHD);
	/* A position at a page boundary stays there until a byte is written. */
	ck_assert_uint_eq(wal_lsn_advance(seg + WAL_PAGE_SIZE - 8, 8, seg), seg + WAL_PAGE_SIZE);
	ck_assert_uint_eq(wal_lsn_advance(seg + WAL_PAGE_SIZE - 8, 9, seg),
	                  seg + WAL_PAGE_SIZE + WAL_SHORT_PHD + 1);
	ck_assert_uint_eq(wal_lsn_advance(2 * seg - 8, 9, seg), 2 * seg + WAL_LONG_PHD + 1);
	ck_assert_uint_eq(wal_lsn_advance(seg + 32, 0, seg), seg + 32);
	srandom(7);
	for (int i = 0; i < 3000; i++) {
		wr_lsn lsn = seg + (uint64_t)random() % (4 * seg);
		if (lsn % WAL_PAGE_SIZE < WAL_LONG_PHD && lsn % WAL_PAGE_SIZE != 0)
			lsn += WAL_LONG_PHD;
		uint64_t len = (uint64_t)random() % (i % 10 == 0 ? 3 * seg : 3 * WAL_PAGE_SIZE);
		ck_assert_uint_eq(wal_lsn_advance(lsn, len, seg), naive_advance(lsn, len, seg));
	}
}
END_TEST

static Suite *record_suite(void)
{
	Suite *s = suite_create("wal-fmt-record");
	TCase *tc = tcase_create("core");
	tcase_add_checked_fixture(tc, NULL, teardown);
	tcase_add_test(tc, test_no_blocks);
	tcase_add_test(tc, test_blocks_and_data);
	tcase_add_test(tc, test_fpi_hole);
	tcase_add_test(tc, test_fpi_no_hole);
	tcase_add_test(tc, test_fpi_decision);
	tcase_add_test(tc, test_many_chunks);
	tcase_add_test(tc, test_big_record);
	tcase_add_test(tc, test_limits);
	tcase_add_test(tc, test_every_byte_checked);
	tcase_add_test(tc, test_structure_checked);
	tcase_add_test(tc, test_fpi_decode_damage);
	tcase_add_test(tc, test_lsn_arithmetic);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run(record_suite());
}
