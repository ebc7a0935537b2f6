/*
 * test_value_limit.c - the largest value, through the public API.
 *
 * A write keeps its overflow pages pinned, in at most a quarter of
 * shared_buffers, so below WALRUS_MAX_VALUE the pool sets the limit.
 * include/walrus.h gives it for the default pool
 * (WALRUS_MAX_VALUE_DEFAULT_POOL) and the shared_buffers a value needs:
 * both sides of each limit are checked here, and the error must name the
 * setting, its value, and the size that would do.
 */
#include "testutil.h"

#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"

/* The shared_buffers WALRUS_MAX_VALUE needs (include/walrus.h). */
#if WALRUS_PAGE_SIZE == 8192
#define MAX_VALUE_POOL          "259MB"
#define MAX_VALUE_POOL_LESS_1MB "258MB"
#else
#define MAX_VALUE_POOL          "260MB"
#define MAX_VALUE_POOL_LESS_1MB "259MB"
#endif

static char *pattern(size_t n, unsigned seed)
{
	char *v = malloc(n);
	ck_assert_ptr_nonnull(v);
	for (size_t i = 0; i < n; i++)
		v[i] = (char)((i * 131 + seed + i / 8191) & 0xff);
	return v;
}

/* Options of a fresh instance; shared_buffers left alone when NULL (the default). */
static walrus *open_pool(const char *dir, const char *shared_buffers)
{
	walrus_opts *o = walrus_opts_new();
	ck_assert_ptr_nonnull(o);
	ck_assert_int_eq(walrus_opts_set(o, "create_if_missing", "on"), WALRUS_OK);
	ck_assert_int_eq(walrus_opts_set(o, "supervisor_linger", "50ms"), WALRUS_OK);
	if (shared_buffers != NULL)
		ck_assert_int_eq(walrus_opts_set(o, "shared_buffers", shared_buffers), WALRUS_OK);
	return tu_open(dir, o);
}

static void put_and_read_back(walrus *db, const char *key, size_t len)
{
	char *v = pattern(len, (unsigned)len);
	int rc = walrus_put(db, key, strlen(key), v, len, WALRUS_SYNC);
	ck_assert_msg(rc == WALRUS_OK, "put of %zu bytes: %d %s", len, rc, walrus_errmsg());
	void *got = NULL;
	size_t gl = 0;
	ck_assert_int_eq(walrus_get(db, key, strlen(key), &got, &gl), WALRUS_OK);
	ck_assert_uint_eq(gl, len);
	ck_assert(memcmp(got, v, len) == 0);
	walrus_free(got);
	free(v);
}

/* Refused with ETOOBIG, nothing stored, and the message names @need and @have. */
static void put_refused(walrus *db, const char *key, size_t len, const char *need, const char *have)
{
	char *v = pattern(len, 7);
	ck_assert_int_eq(walrus_put(db, key, strlen(key), v, len, WALRUS_SYNC), WALRUS_ETOOBIG);
	char want[128];
	snprintf(want, sizeof(want), "needs shared_buffers of at least %s", need);
	ck_assert_msg(strstr(walrus_errmsg(), want) != NULL, "%s", walrus_errmsg());
	snprintf(want, sizeof(want), "shared_buffers is %s", have);
	ck_assert_msg(strstr(walrus_errmsg(), want) != NULL, "%s", walrus_errmsg());
	void *got = NULL;
	size_t gl;
	ck_assert_int_eq(walrus_get(db, key, strlen(key), &got, &gl), WALRUS_ENOTFOUND);
	free(v);
}

/* walrus.h's number is about the default pool: it must still be the default. */
START_TEST(default_pool_is_the_documented_one)
{
	wr_options o;
	wr_opts_defaults(&o);
	ck_assert_int_eq(o.shared_buffers, (int64_t)128 << 20);
}
END_TEST

START_TEST(largest_value_of_the_default_pool)
{
	walrus *db = open_pool(tu_tmpdir("walrus-value"), NULL);
	put_and_read_back(db, "largest", WALRUS_MAX_VALUE_DEFAULT_POOL);
	put_refused(db, "one-more", (size_t)WALRUS_MAX_VALUE_DEFAULT_POOL + 1, "129MB", "128MB");
	put_refused(db, "max", WALRUS_MAX_VALUE, MAX_VALUE_POOL, "128MB");
	tu_close_and_wait(db);
}
END_TEST

/* The size the message gives is enough, and one MB less is not. */
START_TEST(max_value_needs_the_named_pool)
{
	const char *dir = tu_tmpdir("walrus-value");
	walrus *db = open_pool(dir, MAX_VALUE_POOL_LESS_1MB);
	put_refused(db, "max", WALRUS_MAX_VALUE, MAX_VALUE_POOL, MAX_VALUE_POOL_LESS_1MB);
	tu_close_and_wait(db);
	db = open_pool(dir, MAX_VALUE_POOL);
	put_and_read_back(db, "max", WALRUS_MAX_VALUE);
	tu_close_and_wait(db);
}
END_TEST

static Suite *value_suite(void)
{
	Suite *s = suite_create("value-limit");
	TCase *tc = tcase_create("value-limit");
	tcase_set_timeout(tc, 240);
	tcase_add_test(tc, default_pool_is_the_documented_one);
	tcase_add_test(tc, largest_value_of_the_default_pool);
	tcase_add_test(tc, max_value_needs_the_named_pool);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run(value_suite());
}
