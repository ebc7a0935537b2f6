/*
 * test_crc32c.c - CRC32C: known vectors, hardware against software at every
 * alignment, and incremental use.
 */
#include "common/common.h"
#include "testutil.h"

#include <stdlib.h>
#include <string.h>

static uint32_t (*const impls[])(uint32_t, const void *, size_t) = {crc32c, crc32c_sw};

START_TEST(test_check_value)
{
	for (size_t i = 0; i < WR_ARRAY_LEN(impls); i++) {
		ck_assert_uint_eq(impls[i](0, "123456789", 9), 0xE3069283u);
		ck_assert_uint_eq(impls[i](0, "", 0), 0);
	}
}
END_TEST

/* The iSCSI vectors of RFC 3720, appendix B.4. */
START_TEST(test_rfc3720_vectors)
{
	unsigned char zeros[32], ones[32], up[32], down[32];

	memset(zeros, 0, sizeof(zeros));
	memset(ones, 0xff, sizeof(ones));
	for (int i = 0; i < 32; i++) {
		up[i] = (unsigned char)i;
		down[i] = (unsigned char)(31 - i);
	}
	for (size_t i = 0; i < WR_ARRAY_LEN(impls); i++) {
		ck_assert_uint_eq(impls[i](0, zeros, 32), 0x8A9136AAu);
		ck_assert_uint_eq(impls[i](0, ones, 32), 0x62A8AB43u);
		ck_assert_uint_eq(impls[i](0, up, 32), 0x46DD794Eu);
		ck_assert_uint_eq(impls[i](0, down, 32), 0x113FDB5Cu);
	}
}
END_TEST

static void fill_random(unsigned char *buf, size_t len, unsigned seed)
{
	srandom(seed);
	for (size_t i = 0; i < len; i++)
		buf[i] = (unsigned char)random();
}

START_TEST(test_hw_matches_sw)
{
	enum { MAXLEN = 300, ALIGNS = 16 };
	unsigned char *buf = malloc(MAXLEN + ALIGNS);

	ck_assert_ptr_nonnull(buf);
	fill_random(buf, MAXLEN + ALIGNS, 42);
	for (size_t off = 0; off < ALIGNS; off++)
		for (size_t len = 0; len <= MAXLEN; len++) {
			uint32_t seed = (uint32_t)(off * 7919 + len);
			ck_assert_uint_eq(crc32c(seed, buf + off, len),
			                  crc32c_sw(seed, buf + off, len));
		}
	free(buf);
}
END_TEST

START_TEST(test_hw_matches_sw_large)
{
	static const size_t lens[] = {8191, 8192, 8193, 65536 + 3, 1 << 20};
	unsigned char *buf = malloc((1 << 20) + 16);

	ck_assert_ptr_nonnull(buf);
	fill_random(buf, (1 << 20) + 16, 7);
	for (size_t i = 0; i < WR_ARRAY_LEN(lens); i++)
		for (size_t off = 0; off < 16; off += 5)
			ck_assert_uint_eq(crc32c(0, buf + off, lens[i]),
			                  crc32c_sw(0, buf + off, lens[i]));
	free(buf);
}
END_TEST

/* Lengths around the hardware path's rounds of three 1360-byte stripes. */
START_TEST(test_hw_matches_sw_rounds)
{
	enum { ROUND = 3 * 1360, MAXLEN = 3 * ROUND + 64 };
	unsigned char *buf = malloc(MAXLEN + 16);

	ck_assert_ptr_nonnull(buf);
	fill_random(buf, MAXLEN + 16, 11);
	for (size_t r = 1; r <= 3; r++)
		for (size_t len = r * ROUND - 17; len <= r * ROUND + 17; len++)
			for (size_t off = 0; off < 16; off += 3)
				ck_assert_uint_eq(crc32c((uint32_t)len, buf + off, len),
				                  crc32c_sw((uint32_t)len, buf + off, len));
	free(buf);
}
END_TEST

START_TEST(test_incremental)
{
	enum { LEN = 1000 };
	unsigned char buf[LEN];

	fill_random(buf, LEN, 1);
	for (size_t impl = 0; impl < WR_ARRAY_LEN(impls); impl++) {
		uint32_t whole = impls[impl](0, buf, LEN);
		for (size_t cut = 0; cut <= LEN; cut += 37) {
			uint32_t c = impls[impl](0, buf, cut);
			ck_assert_uint_eq(impls[impl](c, buf + cut, LEN - cut), whole);
		}
		/* Byte at a time, through the other implementation for good measure. */
		uint32_t c = 0;
		for (size_t i = 0; i < LEN; i++)
			c = impls[1 - impl](c, buf + i, 1);
		ck_assert_uint_eq(c, whole);
	}
}
END_TEST

START_TEST(test_hw_flag)
{
	/* Either answer is fine; it must be stable and crc32c() must agree with it. */
	bool hw = crc32c_hw_available();
	ck_assert(hw == crc32c_hw_available());
#if defined(__x86_64__)
	ck_assert(hw == (bool)__builtin_cpu_supports("sse4.2"));
#else
	ck_assert(!hw);
#endif
}
END_TEST

int main(void)
{
	Suite *s = suite_create("crc32c");
	TCase *tc = tcase_create("crc32c");

	tcase_add_test(tc, test_check_value);
	tcase_add_test(tc, test_rfc3720_vectors);
	tcase_add_test(tc, test_hw_matches_sw);
	tcase_add_test(tc, test_hw_matches_sw_large);
	tcase_add_test(tc, test_hw_matches_sw_rounds);
	tcase_add_test(tc, test_incremental);
	tcase_add_test(tc, test_hw_flag);
	suite_add_tcase(s, tc);
	return tu_run(s);
}
