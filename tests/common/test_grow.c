/*
 * test_grow.c - wr_grow: doubling from the first size, contents kept, and
 * on overflow or a failed allocation an error with the old buffer intact.
 */
#include "common/common.h"
#include "testutil.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

START_TEST(test_grow_from_empty_and_doubling)
{
	uint32_t *v = NULL;
	size_t cap = 0;

	ck_assert_int_eq(wr_grow(&v, &cap, 1, sizeof(*v), 16), WALRUS_OK);
	ck_assert_ptr_nonnull(v);
	ck_assert_uint_eq(cap, 16);
	for (uint32_t i = 0; i < 16; i++)
		v[i] = i * 7;
	ck_assert_int_eq(wr_grow(&v, &cap, 16, sizeof(*v), 16), WALRUS_OK);
	ck_assert_uint_eq(cap, 16); /* large enough already */
	ck_assert_int_eq(wr_grow(&v, &cap, 17, sizeof(*v), 16), WALRUS_OK);
	ck_assert_uint_eq(cap, 32);
	ck_assert_int_eq(wr_grow(&v, &cap, 100, sizeof(*v), 16), WALRUS_OK);
	ck_assert_uint_eq(cap, 128);
	for (uint32_t i = 0; i < 16; i++)
		ck_assert_uint_eq(v[i], i * 7);
	v[127] = 1; /* the whole capacity is usable (ASan would say otherwise) */
	free(v);
}
END_TEST

START_TEST(test_grow_first_below_need)
{
	char *b = NULL;
	size_t cap = 0;

	ck_assert_int_eq(wr_grow(&b, &cap, 5000, 1, 4096), WALRUS_OK);
	ck_assert_uint_eq(cap, 8192);
	free(b);
	b = NULL;
	cap = 0;
	ck_assert_int_eq(wr_grow(&b, &cap, 3, 1, 0), WALRUS_OK); /* no first size: from 1 */
	ck_assert_uint_eq(cap, 4);
	free(b);
}
END_TEST

START_TEST(test_grow_overflow_keeps_buffer)
{
	uint64_t *v = NULL;
	size_t cap = 0;

	ck_assert_int_eq(wr_grow(&v, &cap, 4, sizeof(*v), 4), WALRUS_OK);
	uint64_t *old = v;
	v[3] = 42;
	/* need * elem does not fit in size_t */
	ck_assert_int_eq(wr_grow(&v, &cap, SIZE_MAX / sizeof(*v) + 1, sizeof(*v), 4),
	                 WALRUS_ENOMEM);
	ck_assert_ptr_eq(v, old);
	ck_assert_uint_eq(cap, 4);
	ck_assert_uint_eq(v[3], 42);
	free(v);
}
END_TEST

START_TEST(test_grow_failure_keeps_buffer)
{
	char *b = NULL;
	size_t cap = 0;

	ck_assert_int_eq(wr_grow(&b, &cap, 10, 1, 16), WALRUS_OK);
	memcpy(b, "walrus", 7);
	char *old = b;
	/* countable but more than any allocator gives (over PTRDIFF_MAX): realloc fails */
	ck_assert_int_eq(wr_grow(&b, &cap, SIZE_MAX / 2 + 1, 1, 16), WALRUS_ENOMEM);
	ck_assert_ptr_eq(b, old);
	ck_assert_uint_eq(cap, 16);
	ck_assert_str_eq(b, "walrus");
	free(b);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("grow");
	TCase *tc = tcase_create("grow");

	tcase_add_test(tc, test_grow_from_empty_and_doubling);
	tcase_add_test(tc, test_grow_first_below_need);
	tcase_add_test(tc, test_grow_overflow_keeps_buffer);
	tcase_add_test(tc, test_grow_failure_keeps_buffer);
	suite_add_tcase(s, tc);
	return tu_run(s);
}
