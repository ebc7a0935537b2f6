/*
 * test_page.c - the page layout and its checksum: every single-bit change of
 * a page, and a page moved to another block, must be detected.
 */
#include <stdlib.h>
#include <string.h>

#include "storage/storage.h"
#include "testutil.h"

static unsigned char page[WR_PAGE_SIZE];

static wr_page_header header_of(const void *p)
{
	wr_page_header h;
	memcpy(&h, p, sizeof(h));
	return h;
}

/* An initialised page with some content, so that no region is trivially zero. */
static void filled_page(void)
{
	page_init(page, 64, 3);
	for (size_t i = WR_PAGE_HEADER_SIZE + 100; i < WR_PAGE_SIZE; i++)
		page[i] = (unsigned char)(i * 131 + 7);
	page_set_lsn(page, 0x0123456789abcdefULL);
}

START_TEST(test_init_layout)
{
	ck_assert_uint_eq(WR_PAGE_HEADER_SIZE, 24);
	memset(page, 0xAA, sizeof(page));
	page_init(page, 32, 7);
	wr_page_header h = header_of(page);
	ck_assert_uint_eq(h.lower, WR_PAGE_HEADER_SIZE);
	ck_assert_uint_eq(h.upper, WR_PAGE_SIZE - 32);
	ck_assert_uint_eq(h.special, WR_PAGE_SIZE - 32);
	ck_assert_uint_eq(h.type, 7);
	ck_assert_uint_eq(h.version, WR_PAGE_VERSION);
	ck_assert_uint_eq(h.checksum, 0);
	ck_assert_uint_eq(h.flags, 0);
	ck_assert_uint_eq(page_get_lsn(page), 0);
	ck_assert_uint_eq(page_free_space(page), WR_PAGE_SIZE - 32 - WR_PAGE_HEADER_SIZE);
	for (size_t i = WR_PAGE_HEADER_SIZE; i < WR_PAGE_SIZE; i++)
		ck_assert_uint_eq(page[i], 0);
	page_init(page, 0, 0);
	ck_assert_uint_eq(page_free_space(page), WR_PAGE_SIZE - WR_PAGE_HEADER_SIZE);
	ck_assert(!page_is_new(page));
	page_set_lsn(page, 0xfeedfacecafebeefULL);
	ck_assert_uint_eq(page_get_lsn(page), 0xfeedfacecafebeefULL);
}
END_TEST

START_TEST(test_is_new)
{
	memset(page, 0, sizeof(page));
	ck_assert(page_is_new(page));
	for (size_t i = 0; i < WR_PAGE_SIZE; i += 1021) {
		page[i] = 1;
		ck_assert(!page_is_new(page));
		page[i] = 0;
	}
	page[WR_PAGE_SIZE - 1] = 0x80;
	ck_assert(!page_is_new(page));
}
END_TEST

START_TEST(test_zero_page_verifies)
{
	memset(page, 0, sizeof(page));
	ck_assert(page_verify(page, 0));
	ck_assert(page_verify(page, 12345));
	page_set_checksum(page, 5);
	ck_assert(page_is_new(page)); /* stays all zero */
}
END_TEST

START_TEST(test_checksum_roundtrip)
{
	filled_page();
	page_set_checksum(page, 9);
	ck_assert_uint_ne(header_of(page).checksum, 0);
	ck_assert_uint_eq(header_of(page).checksum, page_checksum(page, 9));
	ck_assert(page_verify(page, 9));
	ck_assert(!page_verify(page, 10)); /* the same page at another block */
	ck_assert(!page_verify(page, 9 + (1u << 20)));
	ck_assert_uint_ne(page_checksum(page, 0), page_checksum(page, 1));
	ck_assert_uint_ne(page_checksum(page, 0), page_checksum(page, 0x80000000u));
	/* The stored checksum does not feed itself. */
	uint32_t c = page_checksum(page, 9);
	page[9] ^= 0xff;
	ck_assert_uint_eq(page_checksum(page, 9), c);
	ck_assert(!page_verify(page, 9));
}
END_TEST

/* Every bit of bytes spread over the page: header, slot array, middle, end. */
START_TEST(test_checksum_bit_flips)
{
	enum { P = WR_PAGE_SIZE };
	static const size_t bytes[] = {0,         1,     7,        12,      13,    16,
	                               20,        23,    24,       25,      100,   1000,
	                               P / 2 - 1, P / 2, P - 2192, P - 192, P - 2, P - 1};
	filled_page();
	page_set_checksum(page, 77);
	uint32_t good = page_checksum(page, 77);
	for (size_t k = 0; k < sizeof(bytes) / sizeof(bytes[0]); k++) {
		for (int bit = 0; bit < 8; bit++) {
			page[bytes[k]] ^= (unsigned char)(1u << bit);
			ck_assert_msg(page_checksum(page, 77) != good,
			              "byte %zu bit %d not detected", bytes[k], bit);
			ck_assert_msg(!page_verify(page, 77), "byte %zu bit %d verified", bytes[k],
			              bit);
			page[bytes[k]] ^= (unsigned char)(1u << bit);
		}
	}
	/* Every bit of the checksum field itself makes verification fail. */
	for (int bit = 0; bit < 32; bit++) {
		page[8 + bit / 8] ^= (unsigned char)(1u << (bit % 8));
		ck_assert(!page_verify(page, 77));
		page[8 + bit / 8] ^= (unsigned char)(1u << (bit % 8));
	}
	ck_assert(page_verify(page, 77));
}
END_TEST

START_TEST(test_header_sanity)
{
	struct {
		uint16_t lower, upper, special;
		uint8_t version;
	} bad[] = {
	    {10, 8000, 8100, WR_PAGE_VERSION},   /* lower inside the header */
	    {5000, 4000, 8100, WR_PAGE_VERSION}, /* lower > upper */
	    {24, 8150, 8100, WR_PAGE_VERSION},   /* upper > special */
	    {24, 8000, 9000, WR_PAGE_VERSION},   /* special beyond the page */
	    {24, 8000, 8100, 99},                /* unknown version */
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		filled_page();
		wr_page_header h = header_of(page);
		h.lower = bad[i].lower;
		h.upper = bad[i].upper;
		h.special = bad[i].special;
		h.version = bad[i].version;
		memcpy(page, &h, sizeof(h));
		page_set_checksum(page, 3); /* a correct checksum does not save a broken header */
		ck_assert_msg(!page_verify(page, 3), "bad header %zu accepted", i);
	}
	filled_page();
	page_set_checksum(page, 3);
	ck_assert(page_verify(page, 3));
}
END_TEST

START_TEST(test_free_space_never_negative)
{
	filled_page();
	wr_page_header h = header_of(page);
	h.lower = 5000;
	h.upper = 4000;
	memcpy(page, &h, sizeof(h));
	ck_assert_uint_eq(page_free_space(page), 0);
}
END_TEST

static Suite *page_suite(void)
{
	Suite *s = suite_create("page");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, test_init_layout);
	tcase_add_test(tc, test_is_new);
	tcase_add_test(tc, test_zero_page_verifies);
	tcase_add_test(tc, test_checksum_roundtrip);
	tcase_add_test(tc, test_checksum_bit_flips);
	tcase_add_test(tc, test_header_sanity);
	tcase_add_test(tc, test_free_space_never_negative);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run(page_suite());
}
