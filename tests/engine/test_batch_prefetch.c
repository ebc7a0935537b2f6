/*
 * test_batch_prefetch.c - a batch whose leaves the pool lacks reads them
 * before it takes the tree lock (kv_batch.c's leaf prefetch), and only when
 * that pays.
 *
 * The tree (NKEYS keys of VLEN bytes, about 12 MiB) is six times the pool
 * (2 MiB), so random keys' leaves are mostly missing.  Reads served by the
 * page cache are fast, which the batch would judge not worth a prefetch:
 * kv_test_batch_prefetch_slow makes it judge every read its apply waited
 * for as slow.  buf_my_read_counts counts the reads this thread waited for
 * in buf_read (and in sync read streams), not io_uring streams' reads.
 */
#include "testutil.h"

#include "buffer/buffer.h"
#include "kv/kv.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NKEYS 100000
#define VLEN  100
#define NPUT  32 /* keys per batch: leaves that fit the pool many times over */

static const char *dir;

static void setup(void)
{
	dir = tu_tmpdir("bprefetch");
}

static walrus *open_db(const char *io_method)
{
	walrus_opts *o = tu_instance_opts("100ms", "2MB");
	ck_assert_int_eq(walrus_opts_set(o, "io_method", io_method), WALRUS_OK);
	return tu_open(dir, o);
}

static void fill_val(char *v, int i, int salt)
{
	memset(v, 'a' + (i + salt) % 26, VLEN);
	memcpy(v, &salt, sizeof(salt));
}

static void load(walrus *db, walrus_space *sp)
{
	char k[16], v[VLEN];
	walrus_batch *b = walrus_batch_new();
	ck_assert_ptr_nonnull(b);
	for (int i = 0; i < NKEYS; i++) {
		int kl = snprintf(k, sizeof(k), "k%07d", i);
		fill_val(v, i, 0);
		ck_assert_int_eq(walrus_batch_put_in(b, sp, k, (size_t)kl, v, VLEN), WALRUS_OK);
		if (walrus_batch_count(b) == 1000) {
			ck_assert_int_eq(walrus_batch_commit(db, b, WALRUS_ASYNC), WALRUS_OK);
			walrus_batch_clear(b);
		}
	}
	walrus_batch_free(b);
}

/* Puts NPUT keys spread over the tree (from @first, every @step-th) with @salt. */
static int put_spread(walrus *db, walrus_space *sp, int first, int step, int salt)
{
	char k[16], v[VLEN];
	walrus_batch *b = walrus_batch_new();
	ck_assert_ptr_nonnull(b);
	for (int j = 0; j < NPUT; j++) {
		int i = (first + j * step) % NKEYS;
		int kl = snprintf(k, sizeof(k), "k%07d", i);
		fill_val(v, i, salt);
		ck_assert_int_eq(walrus_batch_put_in(b, sp, k, (size_t)kl, v, VLEN), WALRUS_OK);
	}
	int rc = walrus_batch_commit(db, b, WALRUS_ASYNC);
	walrus_batch_free(b);
	return rc;
}

static void check_spread(walrus *db, int first, int step, int salt)
{
	char k[16], want[VLEN], got[VLEN];
	for (int j = 0; j < NPUT; j++) {
		int i = (first + j * step) % NKEYS;
		int kl = snprintf(k, sizeof(k), "k%07d", i);
		size_t vl = 0;
		fill_val(want, i, salt);
		ck_assert_int_eq(walrus_get_into(db, k, (size_t)kl, got, sizeof(got), &vl),
		                 WALRUS_OK);
		ck_assert_uint_eq(vl, VLEN);
		ck_assert(memcmp(got, want, VLEN) == 0);
	}
}

static long pf_batches(walrus *db)
{
	return tu_stat(db, "kv", "prefetch_batches");
}

static long pf_leaves(walrus *db)
{
	return tu_stat(db, "kv", "prefetch_leaves");
}

/*
 * Loop over io_method (0 sync, 1 io_uring).  The first batch of spread
 * keys waits for its leaves under the tree lock; the next one finds its
 * leaves first, and its apply reads none: with io_uring the stream's reads
 * are not the thread's own, so it waits for no read at all; with sync the
 * stream reads each missing leaf once.
 */
START_TEST(batch_reads_its_leaves_before_the_lock)
{
	walrus *db = open_db(_i ? "io_uring" : "sync");
	load(db, NULL);
	kv_test_batch_prefetch_slow(true);
	buf_my_reads r0 = buf_my_read_counts();
	ck_assert_int_eq(put_spread(db, NULL, 17, 3001, 1), WALRUS_OK);
	buf_my_reads r1 = buf_my_read_counts();
	ck_assert_msg(r1.n - r0.n >= 8, "the first batch read %lu leaves itself",
	              (unsigned long)(r1.n - r0.n));
	ck_assert_int_eq(pf_batches(db), 0);

	ck_assert_int_eq(put_spread(db, NULL, 1234, 3001, 2), WALRUS_OK);
	buf_my_reads r2 = buf_my_read_counts();
	ck_assert_int_eq(pf_batches(db), 1);
	long missing = pf_leaves(db);
	ck_assert_msg(missing >= 8 && missing <= NPUT, "%ld leaves prefetched", missing);
	if (_i)
		ck_assert_uint_eq(r2.n - r1.n, 0);
	else
		ck_assert_uint_le(r2.n - r1.n, NPUT);
	kv_test_batch_prefetch_slow(false);
	check_spread(db, 17, 3001, 1);
	check_spread(db, 1234, 3001, 2);
	tu_close_and_wait(db);
}
END_TEST

/*
 * A prefetch that finds every leaf in the pool (the same keys again) turns
 * itself off; the next batch that waits for reads turns it on again.
 */
START_TEST(a_pool_holding_the_leaves_stops_the_prefetch)
{
	walrus *db = open_db("io_uring");
	load(db, NULL);
	kv_test_batch_prefetch_slow(true);
	ck_assert_int_eq(put_spread(db, NULL, 5, 2999, 1), WALRUS_OK); /* measured: on */
	ck_assert_int_eq(put_spread(db, NULL, 999, 2999, 1), WALRUS_OK);
	ck_assert_int_eq(pf_batches(db), 1);
	long leaves = pf_leaves(db);
	ck_assert_int_gt(leaves, 0);
	ck_assert_int_eq(put_spread(db, NULL, 999, 2999, 2), WALRUS_OK); /* all in the pool: off */
	ck_assert_int_eq(pf_batches(db), 2);
	ck_assert_int_eq(pf_leaves(db), leaves);
	ck_assert_int_eq(put_spread(db, NULL, 77, 2999, 1), WALRUS_OK); /* measured: on */
	ck_assert_int_eq(pf_batches(db), 2);
	ck_assert_int_eq(put_spread(db, NULL, 4321, 2999, 1), WALRUS_OK);
	ck_assert_int_eq(pf_batches(db), 3);
	ck_assert_int_gt(pf_leaves(db), leaves);
	kv_test_batch_prefetch_slow(false);
	check_spread(db, 999, 2999, 2);
	check_spread(db, 4321, 2999, 1);
	tu_close_and_wait(db);
}
END_TEST

/* While on, a batch now and then goes without, to measure again. */
START_TEST(the_prefetch_is_measured_again_now_and_then)
{
	walrus *db = open_db("sync");
	load(db, NULL);
	kv_test_batch_prefetch_slow(true);
	const int nbatch = 40;
	for (int j = 0; j < nbatch; j++)
		ck_assert_int_eq(put_spread(db, NULL, j * 7919, 3001, 1), WALRUS_OK);
	long n = pf_batches(db);
	ck_assert_msg(n >= nbatch / 2 && n < nbatch - 1, "%ld batches of %d prefetched", n, nbatch);
	kv_test_batch_prefetch_slow(false);
	tu_close_and_wait(db);
}
END_TEST

/* The files under DIR/base. */
static int base_files(void)
{
	char path[512];
	snprintf(path, sizeof(path), "%s/base", dir);
	DIR *d = opendir(path);
	ck_assert_ptr_nonnull(d);
	int n = 0;
	for (struct dirent *e; (e = readdir(d)) != NULL;)
		n += e->d_name[0] != '.';
	closedir(d);
	return n;
}

/*
 * A key space dropped while the prefetch is on: the next batches into it
 * fail as without a prefetch, read nothing of it, and bring back no file
 * of it.
 */
START_TEST(a_batch_into_a_dropped_space_prefetches_nothing)
{
	walrus *db = open_db("sync");
	int files = base_files();
	walrus_space *sp;
	ck_assert_int_eq(walrus_space_open(db, "big", WALRUS_SPACE_CREATE, &sp), WALRUS_OK);
	load(db, sp);
	ck_assert_int_gt(base_files(), files);
	kv_test_batch_prefetch_slow(true);
	ck_assert_int_eq(put_spread(db, sp, 3, 3001, 1), WALRUS_OK);
	ck_assert_int_eq(put_spread(db, sp, 300, 3001, 1), WALRUS_OK);
	ck_assert_int_eq(pf_batches(db), 1);
	long leaves = pf_leaves(db);
	ck_assert_int_gt(leaves, 0);
	ck_assert_int_eq(walrus_space_drop(db, "big"), WALRUS_OK);
	files = base_files();
	for (int j = 0; j < 3; j++)
		ck_assert_int_eq(put_spread(db, sp, 900 + j, 3001, 1), WALRUS_ENOTFOUND);
	ck_assert_int_eq(pf_batches(db), 1);
	ck_assert_int_eq(pf_leaves(db), leaves);
	ck_assert_int_le(base_files(), files);
	kv_test_batch_prefetch_slow(false);
	tu_close_and_wait(db);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("batch-prefetch");
	TCase *tc = tcase_create("prefetch");
	tcase_set_timeout(tc, 120);
	tcase_add_checked_fixture(tc, setup, NULL);
	tcase_add_loop_test(tc, batch_reads_its_leaves_before_the_lock, 0, 2);
	tcase_add_test(tc, a_pool_holding_the_leaves_stops_the_prefetch);
	tcase_add_test(tc, the_prefetch_is_measured_again_now_and_then);
	tcase_add_test(tc, a_batch_into_a_dropped_space_prefetches_nothing);
	suite_add_tcase(s, tc);
	return tu_run(s);
}
