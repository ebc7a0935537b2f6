/*
 * test_kv_compact.c - compaction (src/kv/kv_compact.c): leaves packed after a
 * random load and after deletes, the tree moved to the front of its file and
 * the tail punched out; redo of a compaction, one stopped between or inside
 * its batches, readers and scans running through it, overflow values, a
 * small pool, its leaves read ahead, and the file system refusing the punch
 * or the space.
 */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "kv/kv_int.h"
#include "kvtest.h"
#include "testsupport/testsupport.h"

enum { N = 20000, VLEN = 100 };
/*
 * How full compaction leaves the leaves: 1/32 under full (the shift's
 * slack), less each leaf's fences and the part of an entry that no longer
 * fit, which take twice as much of a 4 KiB page.
 */
#define PACKED_FILL   (WR_PAGE_SIZE == 8192 ? 0.95 : 0.93)
#define REFILLED_FILL (WR_PAGE_SIZE == 8192 ? 0.90 : 0.88)

static uint32_t order[N];

/* @a = a permutation of 0..n-1, from @seed. */
static void shuffle(uint32_t *a, uint32_t n, uint64_t seed)
{
	for (uint32_t i = 0; i < n; i++)
		a[i] = i;
	for (uint32_t i = n - 1; i > 0; i--) {
		uint32_t j = (uint32_t)(kt_rand(&seed) % (i + 1)), t = a[i];
		a[i] = a[j];
		a[j] = t;
	}
}

static size_t key_of(char *k, uint32_t i)
{
	return (size_t)snprintf(k, 32, "%016u", i);
}

static void value_of(char *v, uint32_t i)
{
	memset(v, (char)('a' + i % 26), VLEN);
	memcpy(v, &i, sizeof(i));
}

/* Keys 0..n-1 in random order, in batches of @per. */
static void random_load_by(uint32_t n, size_t per)
{
	shuffle(order, n, 7);
	kv_batch *b = kv_batch_new();
	for (uint32_t i = 0; i < n; i++) {
		char k[32], v[VLEN];
		size_t kl = key_of(k, order[i]);
		value_of(v, order[i]);
		ck_assert_int_eq(kv_batch_put(b, k, kl, v, VLEN), WALRUS_OK);
		if (kv_batch_count(b) == per || i + 1 == n) {
			int rc = kv_batch_commit(b, KV_ASYNC, NULL);
			ck_assert_msg(rc == WALRUS_OK, "commit: %s", walrus_errmsg());
			kv_batch_clear(b);
		}
	}
	kv_batch_free(b);
}

static void random_load(uint32_t n)
{
	random_load_by(n, 100);
}

/* Every key of [0, n) for which @keep says so is there with its value, the others absent. */
static void check_keys(uint32_t n, bool (*keep)(uint32_t))
{
	for (uint32_t i = 0; i < n; i++) {
		char k[32], v[VLEN];
		size_t kl = key_of(k, i), gl;
		void *got;
		int rc = kv_get(k, kl, &got, &gl);
		if (keep != NULL && !keep(i)) {
			ck_assert_msg(rc == WALRUS_ENOTFOUND, "%s: %d", k, rc);
			continue;
		}
		ck_assert_msg(rc == WALRUS_OK, "%s: %d %s", k, rc, walrus_errmsg());
		value_of(v, i);
		ck_assert(gl == VLEN && memcmp(got, v, VLEN) == 0);
		free(got);
	}
}

/* Leaf fill: entry bytes (line pointers included) over the leaves' space. */
static double leaf_fill(const kv_verify_result *r, uint64_t keys)
{
	return (double)keys *
	       (KV_LEAF_HDR + 16 - r->prefix_bytes / (double)keys + VLEN + KV_LP_SIZE) /
	       ((double)r->leaves * KV_NODE_SPACE);
}

/* 512-byte blocks the data file has allocated, over all its segments. */
static uint64_t file_allocated(void)
{
	uint64_t blocks = 0;
	for (uint32_t seg = 0;; seg++) {
		char path[4096];
		struct stat st;
		if (seg == 0)
			snprintf(path, sizeof(path), "%s/base/1", kt_dir);
		else
			snprintf(path, sizeof(path), "%s/base/1.%u", kt_dir, seg);
		if (stat(path, &st) != 0)
			return blocks;
		blocks += (uint64_t)st.st_blocks;
	}
}

static void compact_ok(kv_compact_result *r)
{
	int rc = kv_compact(r);
	ck_assert_msg(rc == WALRUS_OK, "kv_compact: %d %s", rc, walrus_errmsg());
}

/* A clean tree (@before), compacted, clean again (@after). */
static void compact_verified(kv_verify_result *before, kv_compact_result *c,
                             kv_verify_result *after)
{
	ck_assert_int_eq(kt_verify(before), WALRUS_OK);
	compact_ok(c);
	ck_assert_int_eq(kt_verify(after), WALRUS_OK);
}

/* ---------------------------------------------------------------- packing and giving back */

/*
 * A random load leaves leaves about 85% full; compaction packs them to more
 * than 95% (93% with 4 KiB pages), moves every page below the count of pages in use, lowers the
 * tree's end to it, and the punch gives back exactly the blocks past it.
 */
START_TEST(random_load_packed_and_tail_given_back)
{
	kt_init("walrus-kv-compact", 2048);
	random_load(N);
	kv_verify_result r0, r1;
	kv_compact_result c;
	compact_verified(&r0, &c, &r1);
	ck_assert_double_lt(leaf_fill(&r0, N), 0.90);
	ck_assert_uint_gt(c.leaves_merged, 0);
	ck_assert_uint_gt(c.pages_moved, 0);
	ck_assert_uint_eq(c.blocks_before, r0.pages);
	ck_assert_uint_eq(c.blocks_after, r1.pages);
	ck_assert_uint_eq(r1.free, 0);
	ck_assert_uint_eq(r0.leaves - r1.leaves, c.leaves_merged);
	ck_assert_msg(leaf_fill(&r1, N) > PACKED_FILL, "leaves %.1f%% full after compaction",
	              leaf_fill(&r1, N) * 100);
	check_keys(N, NULL);
	kt_checkpoint(); /* the freed pages are written: punching now gives their space back */
	uint64_t before = file_allocated(), back;
	ck_assert_int_eq(kv_compact_give_back(&back), WALRUS_OK);
	ck_assert_uint_eq(back, r1.unused_tail);
	ck_assert_uint_gt(back, 0);
	ck_assert_uint_eq(before - file_allocated(), back * (WR_PAGE_SIZE / 512));
	/* Nothing left to do the second time. */
	compact_ok(&c);
	ck_assert_uint_eq(c.leaves_merged + c.pages_moved + c.batches, 0);
	ck_assert_uint_eq(c.blocks_after, r1.pages);
}
END_TEST

/* Redo replays a compaction's batches into the same tree. */
START_TEST(compaction_replayed_after_a_crash)
{
	kt_init("walrus-kv-compact", 2048);
	random_load(N);
	kt_checkpoint(); /* redo starts after the load: it replays the compaction alone */
	kv_compact_result c;
	compact_ok(&c);
	wal_flush_to(wal_insert_lsn()); /* compaction's batches are asynchronous */
	kt_crash_restart();
	kv_verify_result r;
	ck_assert_int_eq(kt_verify(&r), WALRUS_OK);
	ck_assert_uint_eq(r.pages, c.blocks_after);
	ck_assert_uint_eq(r.keys, N);
	check_keys(N, NULL);
}
END_TEST

#ifdef WALRUS_TEST_HOOKS /* failpoints */
static bool every_tenth(uint32_t i)
{
	return i % 10 == 0;
}

/*
 * After deleting nine keys in ten, compaction takes the tree back to about
 * a tenth of its pages; new keys then grow it into the punched tail, which
 * the writer allocates again before using it: with the disk full, the put
 * that needs the first such block fails cleanly.
 */
START_TEST(deletes_given_back_and_tail_allocated_again)
{
	kt_init("walrus-kv-compact", 2048);
	random_load(N);
	for (uint32_t i = 0; i < N; i++)
		if (!every_tenth(i)) {
			char k[32];
			size_t kl = key_of(k, i);
			ck_assert_int_eq(kv_delete(k, kl, KV_ASYNC), WALRUS_OK);
		}
	kv_verify_result r0, r1;
	kv_compact_result c;
	compact_verified(&r0, &c, &r1);
	ck_assert_uint_le(r1.pages * 7, r0.pages);
	ck_assert_double_gt(leaf_fill(&r1, N / 10), REFILLED_FILL);
	check_keys(N, every_tenth);
	kt_checkpoint();
	uint64_t back;
	ck_assert_int_eq(kv_compact_give_back(&back), WALRUS_OK);
	ck_assert_uint_gt(back, 0);
	kt_clean_restart(); /* the holes are found again by a new instance */
	/* The next new page is block r1.pages, a hole now: its allocation fails. */
	ck_assert_int_eq(ts_failpoint_set("fallocate:ENOSPC:/base/1*0"), 0);
	int rc = WALRUS_OK;
	uint32_t i = N;
	for (; rc == WALRUS_OK && i < 2 * N; i++) {
		char k[32], v[VLEN];
		size_t kl = key_of(k, i);
		value_of(v, i);
		rc = kv_put(k, kl, v, VLEN, KV_ASYNC);
	}
	ck_assert_int_eq(rc, WALRUS_ENOSPC);
	ck_assert_uint_ge(ts_failpoint_hits(), 1);
	ck_assert_int_eq(ts_failpoint_set(NULL), 0);
	kt_verify_clean();
	/* With room again the tree grows over the old tail. */
	for (i = N; i < 2 * N; i++) {
		char k[32], v[VLEN];
		size_t kl = key_of(k, i);
		value_of(v, i);
		ck_assert_int_eq(kv_put(k, kl, v, VLEN, KV_ASYNC), WALRUS_OK);
	}
	kv_verify_result r2;
	ck_assert_int_eq(kt_verify(&r2), WALRUS_OK);
	ck_assert_uint_eq(r2.keys, N / 10 + N);
	ck_assert_uint_gt(r2.pages, r1.pages);
	kt_checkpoint();
	ck_assert_uint_ge(file_allocated(), r2.pages * (WR_PAGE_SIZE / 512));
}
END_TEST
#endif

static bool first_ten(uint32_t i)
{
	return i < 10;
}

/* A tree deleted down to one leaf: the root (a leaf now) moves to block 1 and
 * the tree ends there. */
START_TEST(down_to_one_leaf)
{
	kt_init("walrus-kv-compact", 2048);
	random_load(N);
	for (uint32_t i = 0; i < N; i++) {
		if (order[i] < 10)
			continue;
		char k[32];
		size_t kl = key_of(k, order[i]);
		ck_assert_int_eq(kv_delete(k, kl, KV_ASYNC), WALRUS_OK);
	}
	kv_verify_result r0, r;
	kv_compact_result c;
	compact_verified(&r0, &c, &r);
	ck_assert_uint_eq(r0.height, 1);
	ck_assert_uint_eq(r.pages, 2);
	ck_assert_uint_eq(c.blocks_after, 2);
	check_keys(N, first_ten);
	wal_flush_to(wal_insert_lsn());
	kt_crash_restart();
	ck_assert_int_eq(kt_verify(&r), WALRUS_OK);
	ck_assert_uint_eq(r.pages, 2);
	check_keys(N, first_ten);
}
END_TEST

/* Two half-empty leaves under the root merge, and the root with one child
 * left goes: the tree is one leaf again. */
START_TEST(root_left_with_one_child_goes)
{
	enum { NK = 100 * WR_PAGE_SIZE / 8192 }; /* two leaves' worth */
	kt_init("walrus-kv-compact", 2048);
	random_load(NK);
	for (uint32_t i = 1; i < NK; i += 2) {
		char k[32];
		size_t kl = key_of(k, i);
		ck_assert_int_eq(kv_delete(k, kl, KV_ASYNC), WALRUS_OK);
	}
	kv_verify_result r0, r;
	kv_compact_result c;
	compact_verified(&r0, &c, &r);
	ck_assert_uint_eq(r0.height, 2);
	ck_assert_uint_ge(c.leaves_merged, 1);
	ck_assert_uint_eq(r.height, 1);
	ck_assert_uint_eq(r.pages, 2);
	ck_assert_uint_eq(r.keys, NK / 2);
}
END_TEST

/* Keys of 300 to 1024 bytes (140 to 480 with 4 KiB pages: long fences and
 * separators, few entries to a leaf), a third deleted: the packed tree holds
 * exactly the rest. */
static size_t long_key(char *k, uint32_t i)
{
	enum { SHORTEST = 300 * KV_MAX_KEY / 1024 };
	size_t len = SHORTEST + (i * 7919u) % (KV_MAX_KEY - SHORTEST + 1);
	memset(k, 'a' + (char)(i % 3), len);
	snprintf(k + len - 12, 12, "%011u", i); /* the order: a class, then i */
	return len - 1;
}

START_TEST(long_keys_packed)
{
	enum { NL = 3000 };
	static char k[KV_MAX_KEY + 16];
	kt_init("walrus-kv-compact", 2048);
	shuffle(order, NL, 11);
	for (uint32_t i = 0; i < NL; i++) {
		size_t kl = long_key(k, order[i]);
		ck_assert_int_eq(kv_put(k, kl, "v", 1, KV_ASYNC), WALRUS_OK);
	}
	for (uint32_t i = 0; i < NL; i += 3) {
		size_t kl = long_key(k, i);
		ck_assert_int_eq(kv_delete(k, kl, KV_ASYNC), WALRUS_OK);
	}
	kv_verify_result r0, r1;
	kv_compact_result c;
	compact_verified(&r0, &c, &r1);
	ck_assert_uint_lt(r1.leaves, r0.leaves);
	ck_assert_uint_eq(r1.keys, NL - (NL + 2) / 3);
	for (uint32_t i = 0; i < NL; i++) {
		size_t kl = long_key(k, i), gl;
		void *got;
		ck_assert_int_eq(kv_get(k, kl, &got, &gl),
		                 i % 3 == 0 ? WALRUS_ENOTFOUND : WALRUS_OK);
		if (i % 3 != 0)
			free(got);
	}
}
END_TEST

#ifdef WALRUS_TEST_HOOKS /* failpoints */
/* After a restart, blocks grown ahead (no hole) are used without another
 * fallocate: with every fallocate failing, the tree still grows into them. */
START_TEST(no_hole_no_allocation_after_a_restart)
{
	kt_init("walrus-kv-compact", 2048);
	random_load(N / 2);
	kv_verify_result r;
	ck_assert_int_eq(kt_verify(&r), WALRUS_OK);
	ck_assert_uint_gt(r.unused_tail, 0); /* grown ahead of the tree */
	kv_stats st;
	kv_get_stats(&st);
	wr_blkno end = (wr_blkno)st.pages;
	kt_clean_restart();
	ck_assert_int_eq(ts_failpoint_set("fallocate:ENOSPC:/base/1*0"), 0);
	for (uint32_t i = N; st.pages == end; i++) {
		char k[32], v[VLEN];
		size_t kl = key_of(k, i);
		value_of(v, i);
		ck_assert_int_eq(kv_put(k, kl, v, VLEN, KV_ASYNC), WALRUS_OK);
		kv_get_stats(&st);
	}
	ck_assert_uint_eq(ts_failpoint_hits(), 0);
	ck_assert_int_eq(ts_failpoint_set(NULL), 0);
	kt_verify_clean();
}
END_TEST
#endif

#ifdef WALRUS_TEST_HOOKS /* failpoints */
/* A file system that cannot punch holes: the space stays, nothing fails;
 * an I/O error is reported. */
START_TEST(punch_refused_or_failing)
{
	kt_init("walrus-kv-compact", 2048);
	random_load(N / 2);
	kv_compact_result c;
	compact_ok(&c);
	kt_checkpoint();
	uint64_t before = file_allocated(), back = 1;
	ck_assert_int_eq(ts_failpoint_set("punch:EOPNOTSUPP:/base/1"), 0);
	ck_assert_int_eq(kv_compact_give_back(&back), WALRUS_OK);
	ck_assert_uint_eq(back, 0);
	ck_assert_uint_eq(file_allocated(), before);
	ck_assert_int_eq(ts_failpoint_set("punch:EIO:/base/1"), 0);
	ck_assert_int_eq(kv_compact_give_back(&back), WALRUS_EIO);
	ck_assert_ptr_nonnull(strstr(walrus_errmsg(), "base/1"));
	ck_assert_int_eq(ts_failpoint_set(NULL), 0);
	ck_assert_int_eq(kv_compact_give_back(&back), WALRUS_OK);
	ck_assert_uint_gt(back, 0);
	kt_verify_clean();
}
END_TEST
#endif

/* ---------------------------------------------------------------- overflow values, small pools */

static size_t big_value(char *v, uint32_t i)
{
	size_t len = 9000 + (size_t)i * 37;
	for (size_t j = 0; j < len; j++)
		v[j] = (char)(i * 13 + j);
	return len;
}

/*
 * Overflow values written last lie at the file's end: their pages move
 * down too (links and entries following them), and every value reads back
 * whole, before and after redo.
 */
START_TEST(overflow_values_stay_whole)
{
	static char v[20000];
	kt_init("walrus-kv-compact", 2048);
	random_load(N / 2);
	for (uint32_t i = 0; i < 40; i++) {
		char k[32];
		size_t kl = (size_t)snprintf(k, sizeof(k), "big-%03u", i);
		ck_assert_int_eq(kv_put(k, kl, v, big_value(v, i), KV_ASYNC), WALRUS_OK);
	}
	for (uint32_t i = 0; i < N / 2; i += 2) {
		char k[32];
		size_t kl = key_of(k, i);
		ck_assert_int_eq(kv_delete(k, kl, KV_ASYNC), WALRUS_OK);
	}
	kv_compact_result c;
	compact_ok(&c);
	kv_verify_result r;
	ck_assert_int_eq(kt_verify(&r), WALRUS_OK);
	ck_assert_uint_gt(r.overflow, 0);
	ck_assert_uint_lt(c.blocks_after, c.blocks_before);
	for (uint32_t i = 0; i < 40; i++) {
		char k[32], want[20000];
		size_t kl = (size_t)snprintf(k, sizeof(k), "big-%03u", i), gl;
		size_t wl = big_value(want, i);
		void *got;
		ck_assert_int_eq(kv_get(k, kl, &got, &gl), WALRUS_OK);
		ck_assert(gl == wl && memcmp(got, want, wl) == 0);
		free(got);
	}
}
END_TEST

/* A pool of 64 pages lets a batch pin 16: compaction takes many small batches,
 * and reads the free list once for all of them. */
START_TEST(small_pool_compacts_in_small_batches)
{
	kt_init("walrus-kv-compact", 64);
	random_load_by(N / 4, 1);
	kv_compact_result c;
	compact_ok(&c);
	kv_verify_result r;
	ck_assert_int_eq(kt_verify(&r), WALRUS_OK);
	ck_assert_uint_gt(c.batches, 20);
	ck_assert_uint_ge(c.pages_moved, 5); /* one move per batch here */
	ck_assert_msg(c.free_list_reads == 1, "the free list read %llu times",
	              (unsigned long long)c.free_list_reads);
	ck_assert_uint_eq(r.free, 0);
	ck_assert_double_gt(leaf_fill(&r, N / 4), 0.93);
	check_keys(N / 4, NULL);
}
END_TEST

/*
 * Loop over io_method (0 sync, 1 io_uring): a tree four times the pool,
 * packed with each batch's leaves read ahead through a read stream (counted
 * in kv.scan_ahead); the result as without.
 */
START_TEST(pack_reads_its_leaves_ahead)
{
	kt_init("walrus-kv-compact", 128);
	ck_assert_int_eq(wr_opts_set(&kt_opts, "io_method", _i ? "io_uring" : "sync"), WALRUS_OK);
	kt_clean_restart();
	random_load_by(N, 10);
	kt_clean_restart(); /* the load's pages written, few of them in the pool */
	kv_stats s0, s1;
	kv_get_stats(&s0);
	kv_verify_result r0, r1;
	kv_compact_result c;
	compact_verified(&r0, &c, &r1);
	kv_get_stats(&s1);
	ck_assert_uint_gt(c.leaves_merged, 0);
	/* Most leaves went through the streams, many of them read or advised. */
	ck_assert_uint_gt(s1.scan_ahead - s0.scan_ahead, r0.leaves / 2);
	ck_assert_uint_gt(s1.scan_ahead_io - s0.scan_ahead_io, r0.leaves / 8);
	check_keys(N, NULL);
}
END_TEST

#ifdef WALRUS_TEST_HOOKS
/* Between compaction's batches: new keys at the end (splits take free pages). */
static void grow_between(void *arg)
{
	uint32_t *next = arg;
	for (int i = 0; i < 40; i++, (*next)++) {
		char k[32], v[VLEN];
		size_t kl = key_of(k, *next);
		value_of(v, *next);
		ck_assert_int_eq(kv_put(k, kl, v, VLEN, KV_ASYNC), WALRUS_OK);
	}
}

/*
 * Writes between compaction's batches change the free list under its copy
 * of it: compaction must read the list again, or it would take pages the
 * writer took (or relink one it reused) as free.
 */
START_TEST(free_list_changed_between_batches)
{
	kt_init("walrus-kv-compact", 64);
	random_load_by(N / 4, 1);
	for (uint32_t i = 0; i < N / 4; i += 2) {
		char k[32];
		size_t kl = key_of(k, i);
		ck_assert_int_eq(kv_delete(k, kl, KV_ASYNC), WALRUS_OK);
	}
	uint32_t next = N;
	kv_test_compact_between(grow_between, &next);
	kv_compact_result c;
	compact_ok(&c);
	kv_test_compact_between(NULL, NULL);
	ck_assert_uint_ge(c.pages_moved, 5);
	ck_assert_uint_gt(c.free_list_reads, 1);
	kv_verify_result r;
	ck_assert_int_eq(kt_verify(&r), WALRUS_OK);
	ck_assert_uint_eq(r.keys, N / 8 + (next - N));
	for (uint32_t i = N; i < next; i += 37) {
		char k[32], v[VLEN];
		size_t kl = key_of(k, i), gl;
		void *got;
		value_of(v, i);
		ck_assert_int_eq(kv_get(k, kl, &got, &gl), WALRUS_OK);
		ck_assert(gl == VLEN && memcmp(got, v, VLEN) == 0);
		free(got);
	}
}
END_TEST
#endif

/* ---------------------------------------------------------------- crashes */

#ifdef WALRUS_TEST_HOOKS
typedef struct crash_args {
	int batches; /* stop after this many batches (0: no) */
	int records; /* stop inside a batch after this many records (0: no) */
} crash_args;

static int compact_child(void *arg)
{
	const crash_args *a = arg;
	int rc = kt_child_attach(1);
	if (rc != 0)
		return rc;
	kv_test_compact_crash_after(a->batches);
	kv_test_crash_after_records(a->records);
	kv_compact_result c;
	kv_compact(&c);
	return 51; /* a hook should have stopped us */
}

/*
 * A compaction stopped by a crash, between two of its batches or inside
 * one: recovery keeps the batches that committed, drops the one cut short,
 * and leaves a valid tree with every key; compaction then runs to its end.
 */
START_TEST(compaction_stopped_by_a_crash)
{
	static const crash_args points[] = {{1, 0}, {2, 0}, {5, 0}, {0, 2}};
	kt_init("walrus-kv-compact", 2048);
	random_load(N);
	wal_flush_to(wal_insert_lsn());
	ck_assert_int_eq(tu_wait(tu_fork(compact_child, (void *)&points[_i])), KV_TEST_CRASH_EXIT);
	kt_crash_restart();
	kv_verify_result r;
	ck_assert_int_eq(kt_verify(&r), WALRUS_OK);
	ck_assert_uint_eq(r.keys, N);
	check_keys(N, NULL);
	kv_compact_result c;
	compact_ok(&c);
	ck_assert_int_eq(kt_verify(&r), WALRUS_OK);
	ck_assert_uint_eq(r.free, 0);
	ck_assert_double_gt(leaf_fill(&r, N), PACKED_FILL);
}
END_TEST
#endif

/* ---------------------------------------------------------------- readers */

enum { NREADERS = 2 };

/* A scan sees every key once, in order, with its value; 0 when it does. */
static int scan_all(void)
{
	kv_iter *it;
	if (kv_iter_open(NULL, 0, NULL, 0, &it) != WALRUS_OK)
		return 1;
	uint32_t n = 0;
	for (; kv_iter_valid(it); n++) {
		const void *k, *v;
		size_t kl, vl;
		char want[32], wv[VLEN];
		kv_iter_key(it, &k, &kl);
		kv_iter_value(it, &v, &vl);
		size_t wl = key_of(want, n);
		value_of(wv, n);
		if (kl != wl || memcmp(k, want, kl) != 0 || vl != VLEN ||
		    memcmp(v, wv, VLEN) != 0) {
			fprintf(stderr, "scan: entry %u is %.*s\n", n, (int)kl, (const char *)k);
			kv_iter_close(it);
			return 2;
		}
		if (kv_iter_next(it) != WALRUS_OK) {
			kv_iter_close(it);
			return 3;
		}
	}
	kv_iter_close(it);
	return n == N ? 0 : 4;
}

/* Gets of random keys and whole scans until the test says stop; counts rounds. */
static int reader(void *arg)
{
	uint64_t seed = (uintptr_t)arg + 1;
	int rc = kt_child_attach(2 + (int)(uintptr_t)arg);
	while (rc == 0 && atomic_load(&kt_sh->go) == 0) {
		for (int g = 0; rc == 0 && g < 500; g++) {
			uint32_t i = (uint32_t)(kt_rand(&seed) % N);
			char k[32], v[VLEN];
			size_t kl = key_of(k, i), gl;
			void *got;
			int e = kv_get(k, kl, &got, &gl);
			value_of(v, i);
			if (e != WALRUS_OK || gl != VLEN || memcmp(got, v, VLEN) != 0) {
				fprintf(stderr, "reader: %s: %d %s\n", k, e, walrus_errmsg());
				rc = 20;
			}
			if (e == WALRUS_OK)
				free(got);
		}
		if (rc == 0)
			rc = scan_all() == 0 ? 0 : 21;
		atomic_fetch_add(&kt_sh->counter, 1);
	}
	return rc != 0 ? rc : kt_child_done();
}

/* Waits until the readers have done @more rounds since @from. */
static void wait_rounds(uint64_t from, uint64_t more, pid_t *pids)
{
	while (atomic_load(&kt_sh->counter) < from + more) {
		for (int i = 0; i < NREADERS; i++)
			ck_assert_msg(!tu_proc_gone(pids[i]), "reader %d stopped early", i);
		sched_yield();
	}
}

/* Gets and scans running through a whole compaction find every key, once. */
START_TEST(readers_see_every_key_during_compaction)
{
	kt_init("walrus-kv-compact", 2048);
	random_load(N);
	pid_t pids[NREADERS];
	for (int i = 0; i < NREADERS; i++)
		pids[i] = tu_fork(reader, (void *)(uintptr_t)i);
	wait_rounds(0, NREADERS, pids);
	kv_compact_result c;
	compact_ok(&c);
	ck_assert_uint_ge(c.batches, 5);
	wait_rounds(atomic_load(&kt_sh->counter), NREADERS, pids);
	atomic_store(&kt_sh->go, 1);
	for (int i = 0; i < NREADERS; i++)
		ck_assert_int_eq(tu_wait(pids[i]), 0);
	kt_verify_clean();
}
END_TEST

/* ---------------------------------------------------------------- writers */

/* Round @r of the writer: a new key "w-<r>" and key 7r (while there is one) gone. */
static int writer_round(uint32_t r)
{
	char k[32], v[VLEN];
	kv_batch *b = kv_batch_new();
	size_t kl = (size_t)snprintf(k, sizeof(k), "w-%08u", r);
	value_of(v, r);
	int rc = kv_batch_put(b, k, kl, v, VLEN);
	if (rc == WALRUS_OK && 7 * (uint64_t)r < N) {
		kl = key_of(k, 7 * r);
		rc = kv_batch_delete(b, k, kl);
	}
	if (rc == WALRUS_OK)
		rc = kv_batch_commit(b, KV_ASYNC, NULL);
	kv_batch_free(b);
	return rc;
}

static int writer(void *arg)
{
	(void)arg;
	int rc = kt_child_attach(2);
	for (uint32_t r = 0; rc == 0 && atomic_load(&kt_sh->go) == 0; r++) {
		if (writer_round(r) != WALRUS_OK) {
			fprintf(stderr, "writer round %u: %s\n", r, walrus_errmsg());
			rc = 30;
		}
		atomic_store(&kt_sh->counter, r + 1);
	}
	return rc != 0 ? rc : kt_child_done();
}

static void wait_writer(uint64_t rounds, pid_t pid)
{
	while (atomic_load(&kt_sh->counter) < rounds) {
		ck_assert_msg(!tu_proc_gone(pid), "the writer stopped early");
		sched_yield();
	}
}

/*
 * A writer's batches between compaction's (new keys, deletes: splits,
 * freed pages, a moving end of the tree): the tree ends valid, packed, and
 * holding exactly what the writer left.
 */
START_TEST(writers_run_between_compaction_batches)
{
	kt_init("walrus-kv-compact", 2048);
	random_load(N);
	pid_t pid = tu_fork(writer, NULL);
	wait_writer(100, pid);
	kv_compact_result c;
	compact_ok(&c);
	ck_assert_uint_ge(c.batches, 5);
	wait_writer(atomic_load(&kt_sh->counter) + 100, pid);
	atomic_store(&kt_sh->go, 1);
	ck_assert_int_eq(tu_wait(pid), 0);
	uint32_t rounds = (uint32_t)atomic_load(&kt_sh->counter);
	kv_verify_result r;
	ck_assert_int_eq(kt_verify(&r), WALRUS_OK);
	uint32_t deleted = rounds < (N + 6) / 7 ? rounds : (N + 6) / 7;
	ck_assert_uint_eq(r.keys, N - deleted + rounds);
	for (uint32_t i = 0; i < N; i += 7) {
		char k[32];
		size_t kl = key_of(k, i), gl;
		void *got;
		ck_assert_int_eq(kv_get(k, kl, &got, &gl),
		                 i / 7 < rounds ? WALRUS_ENOTFOUND : WALRUS_OK);
		if (i / 7 >= rounds)
			free(got);
	}
	for (uint32_t i = 0; i < rounds; i += 97) {
		char k[32];
		size_t kl = (size_t)snprintf(k, sizeof(k), "w-%08u", i), gl;
		void *got;
		ck_assert_int_eq(kv_get(k, kl, &got, &gl), WALRUS_OK);
		free(got);
	}
}
END_TEST

static Suite *compact_suite(void)
{
	Suite *s = suite_create("kv-compact");
	TCase *t = tcase_create("compact");
	tcase_set_timeout(t, 120);
	tcase_add_test(t, random_load_packed_and_tail_given_back);
	tcase_add_test(t, compaction_replayed_after_a_crash);
	tcase_add_test(t, overflow_values_stay_whole);
	tcase_add_test(t, small_pool_compacts_in_small_batches);
	tcase_add_loop_test(t, pack_reads_its_leaves_ahead, 0, 2);
	tcase_add_test(t, down_to_one_leaf);
	tcase_add_test(t, root_left_with_one_child_goes);
	tcase_add_test(t, long_keys_packed);
	tcase_add_test(t, readers_see_every_key_during_compaction);
	tcase_add_test(t, writers_run_between_compaction_batches);
#ifdef WALRUS_TEST_HOOKS
	tcase_add_test(t, deletes_given_back_and_tail_allocated_again);
	tcase_add_test(t, punch_refused_or_failing);
	tcase_add_test(t, no_hole_no_allocation_after_a_restart);
	tcase_add_loop_test(t, compaction_stopped_by_a_crash, 0, 4);
	tcase_add_test(t, free_list_changed_between_batches);
#endif
	suite_add_tcase(s, t);
	return s;
}

int main(void)
{
	return tu_run(compact_suite());
}
