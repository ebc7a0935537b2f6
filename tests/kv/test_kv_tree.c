/*
 * test_kv_tree.c - the tree in one process: gets, puts and deletes with
 * binary keys, the size limits, overflow values and the free list, splits
 * up to four and more levels and back, iterators, batches (including one
 * that fails and is undone), and kv_verify finding damage.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kv/kv_int.h"
#include "kvtest.h"
#include "testsupport/testsupport.h"

static void put_ok(const void *k, size_t kl, const void *v, size_t vl)
{
	int rc = kv_put(k, kl, v, vl, KV_ASYNC);
	ck_assert_msg(rc == WALRUS_OK, "kv_put: %d %s", rc, walrus_errmsg());
}

static void get_is(const void *k, size_t kl, const void *v, size_t vl)
{
	void *got;
	size_t gl;
	int rc = kv_get(k, kl, &got, &gl);
	ck_assert_msg(rc == WALRUS_OK, "kv_get: %d %s", rc, walrus_errmsg());
	ck_assert_uint_eq(gl, vl);
	ck_assert(vl == 0 || memcmp(got, v, vl) == 0);
	free(got);
}

static void get_absent(const void *k, size_t kl)
{
	void *got = (void *)1;
	size_t gl = 1;
	ck_assert_int_eq(kv_get(k, kl, &got, &gl), WALRUS_ENOTFOUND);
	ck_assert_ptr_null(got);
}

static char *pattern(size_t len, unsigned seed)
{
	char *p = malloc(len ? len : 1);
	uint64_t s = seed * 7919ULL + 1;
	for (size_t i = 0; i < len; i++)
		p[i] = (char)(kt_rand(&s) >> 56);
	return p;
}

/* ---------------------------------------------------------------- basics */

START_TEST(put_get_replace_delete)
{
	kt_init("walrus-kv", 256);
	const char k1[] = "a\0b", k2[] = "a", k3[] = "a\0";
	put_ok(k1, 3, "one", 3);
	put_ok(k2, 1, "", 0);
	put_ok(k3, 2, "three", 5);
	get_is(k1, 3, "one", 3);
	get_is(k2, 1, "", 0);
	get_is(k3, 2, "three", 5);
	get_absent("b", 1);
	get_absent("a\0b\0", 4);
	put_ok(k1, 3, "uno!", 4);
	get_is(k1, 3, "uno!", 4);
	char buf[8];
	size_t vl = 0;
	ck_assert_int_eq(kv_get_into(k3, 2, buf, 3, &vl), WALRUS_ETOOBIG);
	ck_assert_uint_eq(vl, 5);
	ck_assert_ptr_nonnull(strstr(walrus_errmsg(), "buffer too small"));
	ck_assert_int_eq(kv_get_into(k3, 2, buf, sizeof(buf), &vl), WALRUS_OK);
	ck_assert(vl == 5 && memcmp(buf, "three", 5) == 0);
	ck_assert_int_eq(kv_delete(k3, 2, KV_SYNC), WALRUS_OK);
	get_absent(k3, 2);
	wal_stats ws0, ws1;
	wal_get_stats(&ws0);
	ck_assert_int_eq(kv_delete(k3, 2, KV_SYNC), WALRUS_ENOTFOUND);
	wal_get_stats(&ws1);
	ck_assert_uint_eq(ws1.records, ws0.records); /* nothing logged */
	kv_stats st;
	kv_get_stats(&st);
	ck_assert_uint_eq(st.keys, 2);
	ck_assert_uint_eq(st.height, 1);
	ck_assert_uint_eq(st.puts, 4);
	kt_verify_clean();
	kt_crash_restart(); /* the last commit was KV_SYNC: everything is durable */
	get_is(k1, 3, "uno!", 4);
	get_is(k2, 1, "", 0);
	get_absent(k3, 2);
	kt_verify_clean();
}
END_TEST

START_TEST(input_limits)
{
	kt_init("walrus-kv", 256);
	char key[KV_MAX_KEY + 1];
	memset(key, 'k', sizeof(key));
	ck_assert_int_eq(kv_put(key, 0, "v", 1, KV_SYNC), WALRUS_EINVAL);
	ck_assert_ptr_nonnull(strstr(walrus_errmsg(), "key must not be empty"));
	ck_assert_int_eq(kv_put(key, KV_MAX_KEY + 1, "v", 1, KV_SYNC), WALRUS_ETOOBIG);
	char size[16];
	snprintf(size, sizeof(size), "%u", KV_MAX_KEY + 1);
	ck_assert_ptr_nonnull(strstr(walrus_errmsg(), size));
	snprintf(size, sizeof(size), "%u", KV_MAX_KEY);
	ck_assert_ptr_nonnull(strstr(walrus_errmsg(), size));
	ck_assert_int_eq(kv_put(key, KV_MAX_KEY, "v", 1, KV_SYNC), WALRUS_OK);
	get_is(key, KV_MAX_KEY, "v", 1);
	/* The size is refused before the value is read. */
	ck_assert_int_eq(kv_put("k", 1, "v", (size_t)KV_MAX_VALUE + 1, KV_SYNC), WALRUS_ETOOBIG);
	ck_assert_ptr_nonnull(strstr(walrus_errmsg(), "67108865"));
	ck_assert_int_eq(kv_put("k", 1, "v", 1, 7), WALRUS_EINVAL);
	ck_assert_int_eq(kv_delete(key, 0, KV_SYNC), WALRUS_EINVAL);
	ck_assert_int_eq(kv_get(key, KV_MAX_KEY + 1, &(void *){0}, &(size_t){0}), WALRUS_ETOOBIG);
	kv_batch *b = kv_batch_new();
	ck_assert_int_eq(kv_batch_put(b, key, 0, "v", 1), WALRUS_EINVAL);
	ck_assert_int_eq(kv_batch_put(b, key, 1, "v", (size_t)KV_MAX_VALUE + 1), WALRUS_ETOOBIG);
	ck_assert_int_eq(kv_batch_delete(b, key, KV_MAX_KEY + 1), WALRUS_ETOOBIG);
	ck_assert_uint_eq(kv_batch_count(b), 0);
	kv_batch_free(b);
	kt_verify_clean();
}
END_TEST

/* ---------------------------------------------------------------- overflow values */

START_TEST(overflow_values_round_trip)
{
	kt_init("walrus-kv", (8 << 20) / WR_PAGE_SIZE); /* 8 MiB: a 1 MiB value may pin 2 MiB */
	size_t inline_max = KV_LEAF_ITEM_MAX - KV_LP_SIZE - KV_LEAF_HDR - 2;
	size_t sizes[] = {0,
	                  1,
	                  inline_max,
	                  inline_max + 1,
	                  KV_OVF_CHUNK,
	                  KV_OVF_CHUNK + 1,
	                  (size_t)3 * KV_OVF_CHUNK,
	                  100000,
	                  1 << 20};
	enum { N = sizeof(sizes) / sizeof(sizes[0]) };
	for (unsigned i = 0; i < N; i++) {
		char k[2] = {'k', (char)i};
		char *v = pattern(sizes[i], i);
		put_ok(k, 2, v, sizes[i]);
		free(v);
	}
	kt_verify_clean();
	kt_clean_restart();
	for (unsigned i = 0; i < N; i++) {
		char k[2] = {'k', (char)i};
		char *v = pattern(sizes[i], i);
		get_is(k, 2, v, sizes[i]);
		size_t vl;
		char *buf = malloc(sizes[i] + 1);
		ck_assert_int_eq(kv_get_into(k, 2, buf, sizes[i], &vl), WALRUS_OK);
		ck_assert(vl == sizes[i] && memcmp(buf, v, vl) == 0);
		free(buf);
		free(v);
	}
	/* Replacing changes the form both ways. */
	char *big = pattern(50000, 99);
	put_ok("k\0", 2, big, 50000);
	put_ok("k\x08", 2, "small", 5);
	get_is("k\0", 2, big, 50000);
	get_is("k\x08", 2, "small", 5);
	free(big);
	kt_verify_clean();
}
END_TEST

START_TEST(free_list_keeps_the_file_from_growing)
{
	kt_init("walrus-kv", 512);
	char *v = pattern(40000, 3);
	kv_stats st;
	uint64_t pages_after_first = 0;
	for (int round = 0; round < 6; round++) {
		for (int i = 0; i < 20; i++) {
			char k[16];
			int kl = snprintf(k, sizeof(k), "key-%03d", i);
			put_ok(k, (size_t)kl, v, 20000 + (size_t)i * 1000);
		}
		for (int i = 0; i < 20; i++) {
			char k[16];
			int kl = snprintf(k, sizeof(k), "key-%03d", i);
			ck_assert_int_eq(kv_delete(k, (size_t)kl, KV_ASYNC), WALRUS_OK);
		}
		kv_get_stats(&st);
		if (round == 0)
			pages_after_first = st.pages;
		ck_assert_uint_eq(st.pages, pages_after_first);
		ck_assert_uint_eq(st.keys, 0);
	}
	ck_assert_uint_gt(st.pages_reused, 300u);
	ck_assert_uint_gt(st.pages_freed, 360u);
	kv_verify_result r;
	ck_assert_int_eq(kt_verify(&r), WALRUS_OK);
	ck_assert_uint_eq(r.free + 2, r.pages); /* the meta page and the empty root leaf */
	free(v);
}
END_TEST

START_TEST(value_of_64_mib)
{
	/* A quarter of the pool must hold the value's overflow pages (~8250 of 8 KiB). */
	kt_init("walrus-kv", 34000 * 8192 / WR_PAGE_SIZE);
	char *v = pattern(KV_MAX_VALUE, 64);
	wal_stats w0, w1;
	wal_get_stats(&w0);
	put_ok("huge", 4, v, KV_MAX_VALUE);
	wal_get_stats(&w1);
	/* Each overflow page is logged once, by its content (no full-page image). */
	ck_assert_uint_lt(w1.bytes - w0.bytes, KV_MAX_VALUE + KV_MAX_VALUE / 50);
	ck_assert_uint_eq(w1.fpis, w0.fpis);
	void *got;
	size_t gl;
	ck_assert_int_eq(kv_get("huge", 4, &got, &gl), WALRUS_OK);
	ck_assert_uint_eq(gl, KV_MAX_VALUE);
	ck_assert(memcmp(got, v, gl) == 0);
	free(got);
	kt_verify_clean();
	ck_assert_int_eq(kv_delete("huge", 4, KV_SYNC), WALRUS_OK);
	kv_stats st;
	kv_get_stats(&st);
	ck_assert_uint_ge(st.free_pages, KV_MAX_VALUE / KV_OVF_CHUNK);
	kt_verify_clean();
	free(v);
}
END_TEST

/* ---------------------------------------------------------------- splits */

/* A 1 KiB key sharing a long prefix: separators stay long, nodes hold few entries. */
static size_t long_key(char *k, uint32_t i)
{
	memset(k, 'p', KV_MAX_KEY);
	snprintf(k + KV_MAX_KEY - 16, 16, "%015u", (unsigned)(i * 2654435761u % 1000003u));
	k[KV_MAX_KEY - 1] = (char)i;
	return KV_MAX_KEY;
}

static void check_scan(uint32_t n, bool present)
{
	kv_iter *it;
	char prev[KV_MAX_KEY];
	size_t prevl = 0;
	uint32_t count = 0;
	ck_assert_int_eq(kv_iter_open(NULL, 0, NULL, 0, &it), WALRUS_OK);
	for (int rc = WALRUS_OK; kv_iter_valid(it); rc = kv_iter_next(it)) {
		ck_assert_int_eq(rc, WALRUS_OK);
		const void *k, *v;
		size_t kl, vl;
		kv_iter_key(it, &k, &kl);
		kv_iter_value(it, &v, &vl);
		ck_assert(count == 0 || kv_cmp(prev, prevl, k, kl) < 0);
		memcpy(prev, k, kl);
		prevl = kl;
		ck_assert_uint_eq(vl, 8);
		count++;
	}
	kv_iter_close(it);
	ck_assert_uint_eq(count, present ? n : 0);
}

START_TEST(splits_at_every_level_and_back)
{
	/* Long separators, so internal nodes hold a few each; leaves hold
	 * hundreds, their keys past the shared padding. */
	enum { N = 16000 };
	char k[KV_MAX_KEY];
	kt_init("walrus-kv", 2048);
	for (uint64_t i = 0; i < N; i++)
		put_ok(k, long_key(k, (uint32_t)i), &i, 8);
	kv_stats st;
	kv_get_stats(&st);
	ck_assert_uint_ge(st.height, 4);
	ck_assert_uint_eq(st.keys, N);
	kt_verify_clean();
	check_scan(N, true);
	wal_flush_to(wal_insert_lsn()); /* what a last KV_SYNC commit would do */
	kt_crash_restart();
	kt_verify_clean();
	for (uint32_t i = 0; i < N; i += 97) {
		uint64_t v = i;
		get_is(k, long_key(k, i), &v, 8);
	}
	for (uint32_t i = 0; i < N; i++)
		ck_assert_int_eq(kv_delete(k, long_key(k, (i * 7) % N), KV_ASYNC), WALRUS_OK);
	kv_get_stats(&st);
	ck_assert_uint_eq(st.keys, 0);
	/* Empty leaves went with the internal nodes they left empty; the root collapsed. */
	ck_assert_uint_eq(st.height, 1);
	ck_assert_uint_eq(st.free_pages, st.pages - 2);
	kt_verify_clean();
	check_scan(N, false);
	for (uint64_t i = 0; i < N; i++)
		put_ok(k, long_key(k, (uint32_t)i), &i, 8);
	kt_verify_clean();
	check_scan(N, true);
}
END_TEST

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

static void fill(uint32_t n, int vlen)
{
	char v[4096];
	memset(v, 'v', sizeof(v));
	for (uint32_t i = 0; i < n; i++) {
		char k[32];
		int kl = snprintf(k, sizeof(k), "k%06u", i);
		put_ok(k, (size_t)kl, v, (size_t)vlen);
	}
}

/* Queue keys: a long common prefix keeps internal nodes small, so many empty out. */
static size_t queue_key(char *k, uint32_t n)
{
	memset(k, 'q', 200);
	return 200 + (size_t)snprintf(k + 200, 16, "%09u", n);
}

/* A queue: new keys at the right end, the oldest deleted at the left. */
START_TEST(queue_workload_reuses_pages)
{
	enum { ROUND = 1000 };
	char v[100], k[256];
	uint64_t pages_early = 0;
	memset(v, 'q', sizeof(v));
	kt_init("walrus-kv", 1024);
	for (uint32_t round = 0; round < 40; round++) {
		for (uint32_t i = 0; i < ROUND; i++)
			put_ok(k, queue_key(k, round * ROUND + i), v, sizeof(v));
		for (uint32_t i = 0; round > 0 && i < ROUND; i++)
			ck_assert_int_eq(
			    kv_delete(k, queue_key(k, (round - 1) * ROUND + i), KV_ASYNC),
			    WALRUS_OK);
		kv_stats st;
		kv_get_stats(&st);
		if (round == 5)
			pages_early = st.pages;
		if (getenv("KV_TEST_VERBOSE"))
			fprintf(stderr, "queue round %u: %llu pages, height %u\n", round,
			        (unsigned long long)st.pages, st.height);
		if (round >
		    5) /* the live set varies a little, but the file does not keep growing */
			ck_assert_uint_le(st.pages, pages_early + pages_early / 10);
	}
	kt_verify_clean();
}
END_TEST

/*
 * An ascending load leaves its leaves full of short entries: the rightmost
 * leaf leaves out what its low fence shares with its keys (shortened when a
 * key without it arrives), and each append split leaves the left half full.
 */
START_TEST(sequential_load_fills_pages)
{
	enum { N = 20000, VLEN = 30 };
	kt_init("walrus-kv", 1024);
	fill(N, VLEN);
	kv_verify_result r;
	ck_assert_int_eq(kt_verify(&r), WALRUS_OK);
	/* Entries of 44 bytes ("k%06u" keys) less what prefixes leave out. */
	double bytes = (double)N * (KV_LEAF_HDR + 7 + VLEN + KV_LP_SIZE) - (double)r.prefix_bytes;
	double fill = bytes / ((double)r.leaves * KV_NODE_SPACE);
	ck_assert_uint_ge(r.prefix_bytes, 3ull * N);
	ck_assert_msg(fill >= 0.95, "leaves %.1f%% full (%llu leaves)", fill * 100,
	              (unsigned long long)r.leaves);
}
END_TEST

/*
 * The rightmost leaf meets keys without its prefix: groups of keys sharing
 * a long start, loaded in order.  Where the leaf has room, its prefix
 * shortens; where it has not (hundreds of entries, each 100 bytes longer
 * without the group's prefix), it splits off its last entry and the key
 * goes to the new rightmost leaf.  Every key is found, in order, after a
 * crash restart too.
 */
static size_t group_pad_key(char *k, uint32_t g, uint32_t i)
{
	return (size_t)snprintf(k, 128, "G%03u%0100u%04u", g, 0u, i);
}

START_TEST(rightmost_leaf_prefix_meets_new_groups)
{
	enum { GROUPS = 10, PER = 1000 };
	char k[128];
	uint64_t v;
	kt_init("walrus-kv", 1024);
	for (uint32_t g = 0; g < GROUPS; g++) {
		kv_batch *b = kv_batch_new();
		for (uint32_t i = 0; i < PER; i++) {
			v = g * PER + i;
			ck_assert_int_eq(kv_batch_put(b, k, group_pad_key(k, g, i), &v, sizeof(v)),
			                 WALRUS_OK);
		}
		ck_assert_int_eq(kv_batch_commit(b, KV_ASYNC, NULL), WALRUS_OK);
		kv_batch_free(b);
	}
	kv_verify_result r, again;
	ck_assert_int_eq(kt_verify(&r), WALRUS_OK);
	/* 108-byte keys, of which the leaves keep about ten bytes */
	ck_assert_uint_ge(r.prefix_bytes, 90ull * GROUPS * PER);
	for (int pass = 0; pass < 2; pass++) {
		for (uint32_t g = 0; g < GROUPS; g++)
			for (uint32_t i = 0; i < PER; i += 111) {
				v = g * PER + i;
				get_is(k, group_pad_key(k, g, i), &v, sizeof(v));
			}
		kv_iter *it;
		ck_assert_int_eq(kv_iter_open(NULL, 0, NULL, 0, &it), WALRUS_OK);
		for (uint32_t n = 0; n < GROUPS * PER; n++) {
			ck_assert(kv_iter_valid(it));
			const void *ik;
			size_t ikl;
			kv_iter_key(it, &ik, &ikl);
			size_t kl = group_pad_key(k, n / PER, n % PER);
			ck_assert(ikl == kl && memcmp(ik, k, kl) == 0);
			ck_assert_int_eq(kv_iter_next(it), WALRUS_OK);
		}
		ck_assert(!kv_iter_valid(it));
		kv_iter_close(it);
		if (pass == 0) {
			wal_flush_to(wal_insert_lsn()); /* the batches were asynchronous */
			kt_crash_restart();
			ck_assert_int_eq(kt_verify(&again), WALRUS_OK);
			ck_assert_uint_eq(again.prefix_bytes, r.prefix_bytes);
		}
	}
}
END_TEST

/* Puts keys "k%06u" for @n indexes of @order (NULL: 0..n-1); returns the fast-path hits. */
static uint64_t load_hits(uint32_t n, const uint32_t *order)
{
	kv_stats st0, st1;
	char v[30];
	memset(v, 'v', sizeof(v));
	kv_get_stats(&st0);
	for (uint32_t i = 0; i < n; i++) {
		char k[32];
		int kl = snprintf(k, sizeof(k), "k%06u", order ? order[i] : i);
		put_ok(k, (size_t)kl, v, sizeof(v));
	}
	kv_get_stats(&st1);
	return st1.fastpath_hits - st0.fastpath_hits;
}

/*
 * An ascending load goes to the rightmost leaf without descending, except
 * for the first put (no hint yet) and the puts that split a leaf; its WAL
 * replays to the same tree.
 */
enum { FAST_N = 20000 };
START_TEST(rightmost_leaf_fast_path_ascending)
{
	kt_init("walrus-kv", 1024);
	kv_stats st;
	uint64_t hits = load_hits(FAST_N, NULL);
	kv_get_stats(&st);
	ck_assert_uint_ge(hits, FAST_N - 1 - st.splits);
	ck_assert_uint_lt(hits, FAST_N);
	/* In a batch too, across the splits it makes. */
	kv_stats st1;
	kv_batch *b = kv_batch_new();
	char v[30];
	memset(v, 'b', sizeof(v));
	for (uint32_t i = FAST_N; i < FAST_N + 2000; i++) {
		char k[32];
		int kl = snprintf(k, sizeof(k), "k%06u", i);
		ck_assert_int_eq(kv_batch_put(b, k, (size_t)kl, v, sizeof(v)), WALRUS_OK);
	}
	ck_assert_int_eq(kv_batch_commit(b, KV_ASYNC, NULL), WALRUS_OK);
	kv_batch_free(b);
	kv_get_stats(&st1);
	ck_assert_uint_ge(st1.fastpath_hits - st.fastpath_hits, 2000 - (st1.splits - st.splits));
	kt_verify_clean();
	wal_flush_to(wal_insert_lsn()); /* the puts were asynchronous */
	kt_crash_restart();
	kv_get_stats(&st);
	ck_assert_uint_eq(st.keys, FAST_N + 2000);
	kt_verify_clean();
}
END_TEST

/* A descending load never can take the fast path; a random one only for its new maxima. */
START_TEST(rightmost_leaf_fast_path_other_orders)
{
	static uint32_t order[FAST_N];
	bool descending = _i == 0;
	kt_init("walrus-kv", 1024);
	shuffle(order, FAST_N, 42);
	for (uint32_t i = 0; descending && i < FAST_N; i++)
		order[i] = FAST_N - 1 - i;
	uint64_t hits = load_hits(FAST_N, order);
	if (descending)
		ck_assert_uint_eq(hits, 0);
	else
		ck_assert_uint_lt(hits, FAST_N / 100);
	kt_verify_clean();
}
END_TEST

/*
 * A put that does not go to the rightmost leaf checks the hint without
 * locking that leaf: a batch of random puts must not keep the leaf's
 * readers waiting until it ends.
 */
START_TEST(rightmost_leaf_hint_check_takes_no_lock)
{
	kt_init("walrus-kv", 1024);
	load_hits(2000, NULL); /* ascending: the hint names the rightmost leaf */
	char v[30];
	memset(v, 'm', sizeof(v));
	rw_lock_excl(&kv_sh->tree_lock);
	ck_assert_int_eq(kvw_batch_begin(), WALRUS_OK);
	ck_assert_int_eq(kvm_put("k000500x", 8, v, sizeof(v), NULL), WALRUS_OK);
	kvw_page *p;
	ck_assert_uint_ne(KV_TREE_MAIN->rightmost_leaf, 0);
	ck_assert_int_eq(kvw_get(KV_TREE_MAIN->rightmost_leaf, &p), WALRUS_OK);
	ck_assert(!p->locked);
	kvw_abort();
	rw_unlock(&kv_sh->tree_lock);
	kt_verify_clean();
}
END_TEST

/*
 * A random load moves entries of a full leaf to a sibling that has room
 * before it splits, so leaves end fuller than the halves splits leave
 * (about 69% full on average): at least 80% here.  Then a crash restart
 * replays the moves to the same tree.
 */
START_TEST(random_load_shifts_before_splitting)
{
	enum { N = 20000, VLEN = 100 };
	static uint32_t order[N];
	kt_init("walrus-kv", 1024);
	shuffle(order, N, 7);
	char v[VLEN];
	memset(v, 'r', sizeof(v));
	for (uint32_t i = 0; i < N; i++) {
		char k[32];
		int kl = snprintf(k, sizeof(k), "%016u", order[i]);
		put_ok(k, (size_t)kl, v, sizeof(v));
	}
	kv_stats st;
	kv_get_stats(&st);
	kv_verify_result r;
	ck_assert_int_eq(kt_verify(&r), WALRUS_OK);
	/* Each entry: header, key, value and line pointer. */
	double bytes = (double)N * (KV_LEAF_HDR + 16 + VLEN + KV_LP_SIZE);
	double fill = bytes / ((double)r.leaves * KV_NODE_SPACE);
	ck_assert_uint_gt(st.shifts, 0);
	ck_assert_msg(fill >= 0.80, "leaves %.1f%% full (%llu leaves, %llu shifts)", fill * 100,
	              (unsigned long long)r.leaves, (unsigned long long)st.shifts);
	wal_flush_to(wal_insert_lsn()); /* the puts were asynchronous */
	kt_crash_restart();
	kv_get_stats(&st);
	ck_assert_uint_eq(st.keys, N);
	kt_verify_clean();
	char k[32];
	int kl = snprintf(k, sizeof(k), "%016u", N / 3);
	get_is(k, (size_t)kl, v, sizeof(v));
}
END_TEST

enum { PFX_N = 20000, PFX_VLEN = 100 };

static int pfx_key(char *k, uint32_t i)
{
	return snprintf(k, 32, "account:%08u", i);
}

static void pfx_value(char *v, uint32_t i)
{
	memset(v, (char)('a' + i % 26), PFX_VLEN);
	memcpy(v, &i, sizeof(i));
}

/* Every key of [0, @to) in order, whole, with its value, and none after. */
static void pfx_scan_to(uint32_t to)
{
	char k[32], hi[32], v[PFX_VLEN];
	int hl = pfx_key(hi, to);
	kv_iter *it;
	ck_assert_int_eq(kv_iter_open(NULL, 0, to < PFX_N ? hi : NULL, (size_t)hl, &it), WALRUS_OK);
	uint32_t i = 0;
	for (; kv_iter_valid(it); i++) {
		const void *key, *val;
		size_t kl, vl;
		kv_iter_key(it, &key, &kl);
		kv_iter_value(it, &val, &vl);
		int want = pfx_key(k, i);
		ck_assert_msg(kl == (size_t)want && memcmp(key, k, kl) == 0, "key %u: %.*s", i,
		              (int)kl, (const char *)key);
		pfx_value(v, i);
		ck_assert(vl == PFX_VLEN && memcmp(val, v, vl) == 0);
		ck_assert_int_eq(kv_iter_next(it), WALRUS_OK);
	}
	ck_assert_uint_eq(i, to);
	kv_iter_close(it);
}

/*
 * Leaves leave out the key bytes their fences share: a random load of keys
 * with a long common start stores each key's tail; gets, bounded scans and
 * backward steps see whole keys; redo rebuilds the same leaves; deleting
 * every key in random order (neighbours take over empty leaves' ranges,
 * their prefixes shrinking, at the tree's ends to nothing) leaves one leaf.
 */
START_TEST(leaves_leave_out_shared_prefixes)
{
	static uint32_t order[PFX_N];
	char k[32], v[PFX_VLEN];
	kt_init("walrus-kv", 1024);
	shuffle(order, PFX_N, 11);
	for (uint32_t i = 0; i < PFX_N; i++) {
		pfx_value(v, order[i]);
		put_ok(k, (size_t)pfx_key(k, order[i]), v, sizeof(v));
	}
	kv_verify_result r, again;
	ck_assert_int_eq(kt_verify(&r), WALRUS_OK);
	/* "account:000" and more is shared within a leaf of about sixty keys */
	ck_assert_msg(r.prefix_bytes >= 11ull * PFX_N, "%llu prefix bytes",
	              (unsigned long long)r.prefix_bytes);
	for (uint32_t i = 0; i < PFX_N; i += 37) {
		pfx_value(v, i);
		get_is(k, (size_t)pfx_key(k, i), v, sizeof(v));
	}
	get_absent("account:", 8);
	get_absent("account:00020000", 16);
	pfx_scan_to(PFX_N);
	pfx_scan_to(PFX_N / 2 + 7);
	kv_iter *it;
	ck_assert_int_eq(kv_iter_open(NULL, 0, NULL, 0, &it), WALRUS_OK);
	ck_assert_int_eq(kv_iter_seek(it, "account:00000100", 16), WALRUS_OK);
	for (int i = 100; i > 90; i--)
		ck_assert_int_eq(kv_iter_prev(it), WALRUS_OK);
	const void *key;
	size_t kl;
	kv_iter_key(it, &key, &kl);
	ck_assert(kl == 16 && memcmp(key, "account:00000090", 16) == 0);
	kv_iter_close(it);
	wal_flush_to(wal_insert_lsn()); /* the puts were asynchronous */
	kt_crash_restart();
	ck_assert_int_eq(kt_verify(&again), WALRUS_OK);
	ck_assert_uint_eq(again.prefix_bytes, r.prefix_bytes);
	ck_assert_uint_eq(again.leaves, r.leaves);
	shuffle(order, PFX_N, 12);
	for (uint32_t i = 0; i < PFX_N; i++)
		ck_assert_int_eq(kv_delete(k, (size_t)pfx_key(k, order[i]), KV_ASYNC), WALRUS_OK);
	kv_stats st;
	kv_get_stats(&st);
	ck_assert_uint_eq(st.keys, 0);
	ck_assert_uint_eq(st.height, 1);
	kt_verify_clean();
}
END_TEST

/*
 * A put that changes only a leaf and the key count logs the count alone
 * (KVOP_NKEYS, 8 bytes), not the whole meta struct: record header, two block
 * headers, the insert op and the count op.
 */
/*
 * An ascending load grows the data file in runs of blocks, not a block (and
 * a size check) per new page; after a crash restart the tree goes on taking
 * the grown blocks in order, and at most one run stays unused past its end.
 */
START_TEST(ascending_load_grows_file_in_runs)
{
	kt_init("walrus-kv", 1024);
	fill(8000, 600); /* ~5 MB: about 650 leaves */
	kv_stats st;
	kv_get_stats(&st);
	ck_assert_uint_gt(st.pages, 500);
	ck_assert_uint_ge(st.file_grows, 1);
	ck_assert_uint_le(st.file_grows * 8, st.pages);
	ck_assert_uint_le(st.size_checks * 8, st.pages);
	wal_flush_to(wal_insert_lsn()); /* the puts were asynchronous */
	kt_crash_restart();
	char v[600];
	memset(v, 'w', sizeof(v));
	for (uint32_t i = 8000; i < 10000; i++) {
		char k[32];
		int kl = snprintf(k, sizeof(k), "k%06u", i);
		put_ok(k, (size_t)kl, v, sizeof(v));
	}
	kv_verify_result r;
	ck_assert_int_eq(kt_verify(&r), WALRUS_OK);
	ck_assert_uint_eq(r.errors, 0);
	ck_assert_uint_eq(r.keys, 10000);
	ck_assert_uint_le(r.unused_tail, 128);
}
END_TEST

#ifdef WALRUS_TEST_HOOKS
/*
 * A full disk while the file grows: a run that does not fit falls back to
 * the one block needed; when that does not fit either, the put fails with
 * WALRUS_ENOSPC naming the file, and every earlier put is still there.
 */
START_TEST(full_disk_while_growing)
{
	kt_init("walrus-kv", 1024);
	fill(2000, 600);
	char v[600];
	memset(v, 'f', sizeof(v));
	/* The next growth's run fails, its single block does not. */
	kv_stats st0, st1;
	kv_get_stats(&st0);
	ck_assert_int_eq(ts_failpoint_set("fallocate:ENOSPC:/base/1*1"), 0);
	uint32_t i = 2000;
	for (; ts_failpoint_hits() == 0 && i < 4000; i++) {
		char k[32];
		int kl = snprintf(k, sizeof(k), "k%06u", i);
		put_ok(k, (size_t)kl, v, sizeof(v));
	}
	kv_get_stats(&st1);
	ck_assert_uint_eq(ts_failpoint_hits(), 1);
	ck_assert_uint_eq(st1.file_grows - st0.file_grows, 1);
	/* Now no block fits: puts go on until one needs a new block, which fails. */
	ck_assert_int_eq(ts_failpoint_set("fallocate:ENOSPC:/base/1*0"), 0);
	int rc = WALRUS_OK;
	char k[32];
	int kl = 0;
	for (; rc == WALRUS_OK && i < 6000; i++) {
		kl = snprintf(k, sizeof(k), "k%06u", i);
		rc = kv_put(k, (size_t)kl, v, sizeof(v), KV_ASYNC);
	}
	ck_assert_int_eq(rc, WALRUS_ENOSPC);
	ck_assert_ptr_nonnull(strstr(walrus_errmsg(), "base/1"));
	ck_assert_ptr_nonnull(strstr(walrus_errmsg(), "No space left on device"));
	ck_assert_uint_eq(ts_failpoint_hits(), 3); /* the run, then the single block */
	ck_assert_int_eq(kv_get(k, (size_t)kl, &(void *){NULL}, &(size_t){0}), WALRUS_ENOTFOUND);
	uint32_t failed = i - 1;
	ck_assert_int_eq(ts_failpoint_set(NULL), 0);
	kv_stats st;
	kv_get_stats(&st);
	ck_assert_uint_eq(st.keys, failed);
	kt_verify_clean();
	put_ok(k, (size_t)kl, v, sizeof(v)); /* room again */
	get_is(k, (size_t)kl, v, sizeof(v));
	kt_verify_clean();
}
END_TEST
#endif

START_TEST(small_put_logs_the_key_count_only)
{
	kt_init("walrus-kv", 1024);
	char k[16], v[100];
	memset(v, 'v', sizeof(v));
	memcpy(k, "k000000000000000", sizeof(k));
	put_ok(k, sizeof(k), v, sizeof(v)); /* the leaf's first change after the redo point */
	k[15] = '1';
	wal_stats ws0, ws1;
	wal_get_stats(&ws0);
	put_ok(k, sizeof(k), v, sizeof(v));
	wal_get_stats(&ws1);
	size_t want = WAL_RECORD_HEADER + 2 * sizeof(wal_block_header) +
	              (KVOP_HDR + KV_LEAF_HDR + sizeof(k) + sizeof(v)) + (KVOP_HDR + 8);
	ck_assert_uint_eq(ws1.records - ws0.records, 1);
	ck_assert_uint_le(ws1.bytes - ws0.bytes, want + 7); /* alignment */
	wal_flush_to(wal_insert_lsn());
	kt_crash_restart(); /* redo applies the count */
	kv_stats st;
	kv_get_stats(&st);
	ck_assert_uint_eq(st.keys, 2);
	kt_verify_clean();
}
END_TEST

/* A hint naming a leaf that was emptied and freed, then reused, is not followed. */
START_TEST(rightmost_leaf_hint_goes_stale)
{
	kt_init("walrus-kv", 1024);
	fill(5000, 30);
	for (uint32_t i = 4999; i >= 4000; i--) { /* frees the rightmost leaves */
		char k[32];
		int kl = snprintf(k, sizeof(k), "k%06u", i);
		ck_assert_int_eq(kv_delete(k, (size_t)kl, KV_ASYNC), WALRUS_OK);
	}
	kv_stats st;
	kv_get_stats(&st);
	ck_assert_uint_gt(st.pages_freed, 0);
	char v[30];
	memset(v, 'w', sizeof(v));
	for (uint32_t i = 0; i < 1000; i++) { /* reuses them in the middle of the tree */
		char k[32];
		int kl = snprintf(k, sizeof(k), "k%06u.%u", 2000 + i, i);
		put_ok(k, (size_t)kl, v, sizeof(v));
	}
	kv_get_stats(&st);
	ck_assert_uint_gt(st.pages_reused, 0);
	for (uint32_t i = 4000; i < 6000; i++) {
		char k[32];
		int kl = snprintf(k, sizeof(k), "k%06u", i);
		put_ok(k, (size_t)kl, v, sizeof(v));
	}
	kt_verify_clean();
	kv_get_stats(&st);
	ck_assert_uint_eq(st.keys, 7000);
	get_is("k005999", 7, v, sizeof(v));
	get_is("k002500.500", 11, v, sizeof(v));
}
END_TEST

/* ---------------------------------------------------------------- iterators */

static int iter_key_num(kv_iter *it)
{
	const void *k;
	size_t kl;
	kv_iter_key(it, &k, &kl);
	return atoi((const char *)k + 1);
}

START_TEST(iterator_bounds_seek_next_prev)
{
	kt_init("walrus-kv", 512);
	kv_iter *it;
	ck_assert_int_eq(kv_iter_open(NULL, 0, NULL, 0, &it), WALRUS_OK);
	ck_assert(!kv_iter_valid(it)); /* empty tree */
	ck_assert_int_eq(kv_iter_seek_last(it), WALRUS_OK);
	ck_assert(!kv_iter_valid(it));
	kv_iter_close(it);
	fill(3000, 100); /* k000000 .. k002999, many leaves */
	ck_assert_int_eq(kv_iter_open("k000100", 7, "k002000", 7, &it), WALRUS_OK);
	ck_assert(kv_iter_valid(it));
	ck_assert_int_eq(iter_key_num(it), 100);
	int n = 0;
	while (kv_iter_valid(it)) {
		ck_assert_int_eq(iter_key_num(it), 100 + n);
		n++;
		ck_assert_int_eq(kv_iter_next(it), WALRUS_OK);
	}
	ck_assert_int_eq(n, 1900);
	ck_assert_int_eq(kv_iter_seek_last(it), WALRUS_OK);
	ck_assert_int_eq(iter_key_num(it), 1999);
	for (n = 1999; kv_iter_valid(it); n--) {
		ck_assert_int_eq(iter_key_num(it), n);
		ck_assert_int_eq(kv_iter_prev(it), WALRUS_OK);
	}
	ck_assert_int_eq(n, 99);
	ck_assert_int_eq(kv_iter_seek(it, "k0005005", 8), WALRUS_OK); /* between keys */
	ck_assert_int_eq(iter_key_num(it), 501);
	ck_assert_int_eq(kv_iter_prev(it), WALRUS_OK);
	ck_assert_int_eq(iter_key_num(it), 500);
	ck_assert_int_eq(kv_iter_next(it), WALRUS_OK);
	ck_assert_int_eq(iter_key_num(it), 501);
	ck_assert_int_eq(kv_iter_seek(it, "a", 1), WALRUS_OK); /* below lo: lo */
	ck_assert_int_eq(iter_key_num(it), 100);
	ck_assert_int_eq(kv_iter_seek(it, "k002000", 7), WALRUS_OK); /* hi is exclusive */
	ck_assert(!kv_iter_valid(it));
	kv_iter_close(it);
	/* Unbounded: from the first key, backwards from the last. */
	ck_assert_int_eq(kv_iter_open(NULL, 0, NULL, 0, &it), WALRUS_OK);
	ck_assert_int_eq(iter_key_num(it), 0);
	ck_assert_int_eq(kv_iter_prev(it), WALRUS_OK);
	ck_assert(!kv_iter_valid(it));
	ck_assert_int_eq(kv_iter_seek_last(it), WALRUS_OK);
	ck_assert_int_eq(iter_key_num(it), 2999);
	ck_assert_int_eq(kv_iter_next(it), WALRUS_OK);
	ck_assert(!kv_iter_valid(it));
	kv_iter_close(it);
	/* An empty range. */
	ck_assert_int_eq(kv_iter_open("k1", 2, "k2", 2, &it), WALRUS_OK);
	ck_assert(!kv_iter_valid(it));
	ck_assert_int_eq(kv_iter_seek_last(it), WALRUS_OK);
	ck_assert(!kv_iter_valid(it));
	kv_iter_close(it);
}
END_TEST

/*
 * Gets and backward scans through this process's copies of the internal
 * nodes, whose search compares 8-byte heads after the prefix the separators
 * share (kv_tree.c).  The keys make heads tie: three groups differ in their
 * first byte, then 14 equal bytes, so the root's separators share nothing
 * and their heads (bytes 0-7) are equal within a group.  Keys below, between
 * and above the groups, prefixes and extensions of present keys are absent.
 */
static size_t group_key(char *k, char group, uint32_t n)
{
	return (size_t)snprintf(k, 32, "%c##############%06u", group, n);
}

START_TEST(copies_search_with_tied_heads)
{
	kt_init("walrus-kv", 512);
	const char groups[] = {'a', 'm', 'z'};
	const uint32_t per = 6000;
	char k[48], v[200];
	for (int g = 0; g < 3; g++)
		for (uint32_t i = 0; i < per; i++) {
			memset(v, groups[g] + (int)(i % 7), sizeof(v));
			put_ok(k, group_key(k, groups[g], i), v, sizeof(v));
		}
	kv_stats st0, st1;
	kv_get_stats(&st0);
	ck_assert_uint_ge(st0.height, 3);
	for (int pass = 0; pass < 2; pass++) /* the first takes the copies */
		for (int g = 0; g < 3; g++)
			for (uint32_t i = 0; i < per; i++) {
				memset(v, groups[g] + (int)(i % 7), sizeof(v));
				get_is(k, group_key(k, groups[g], i), v, sizeof(v));
			}
	kv_get_stats(&st1);
	/* The copies answered: nearly every get is a peek at a leaf. */
	ck_assert_uint_ge(st1.optimistic_reads - st0.optimistic_reads, 2 * 3 * per * 9 / 10);
	const char *absent[] = {"0",
	                        "a",
	                        "a##############",
	                        "b##############000001",
	                        "m##############006000",
	                        "m##############0000009",
	                        "a##############000000x",
	                        "z##############",
	                        "zz",
	                        "~"};
	for (size_t i = 0; i < WR_ARRAY_LEN(absent); i++)
		get_absent(absent[i], strlen(absent[i]));
	/* Backwards through every leaf: KV_SEEK_LT descents, strictly below. */
	kv_iter *it;
	ck_assert_int_eq(kv_iter_open(NULL, 0, NULL, 0, &it), WALRUS_OK);
	ck_assert_int_eq(kv_iter_seek_last(it), WALRUS_OK);
	uint32_t n = 0;
	for (int g = 2; g >= 0; g--)
		for (uint32_t i = per; i-- > 0; n++) {
			ck_assert(kv_iter_valid(it));
			const void *ik;
			size_t ikl;
			kv_iter_key(it, &ik, &ikl);
			size_t kl = group_key(k, groups[g], i);
			ck_assert_uint_eq(ikl, kl);
			ck_assert(memcmp(ik, k, kl) == 0);
			ck_assert_int_eq(kv_iter_prev(it), WALRUS_OK);
		}
	ck_assert(!kv_iter_valid(it));
	ck_assert_uint_eq(n, (uintmax_t)3 * per);
	kv_iter_close(it);
}
END_TEST

/*
 * Internal nodes at block numbers a random load scattered: a descent keeps a
 * copy of each (KV_NODE_COPIES of them fit), so once every node was read,
 * gets take no copies.  Copies in two-way sets by block number dropped each
 * other here: a few hundred nodes in 256 sets put three or more in some.
 */
START_TEST(copies_keep_every_internal_node)
{
	enum { N = WR_PAGE_SIZE == 8192 ? 15000 : 11000 }; /* 300-512 internal nodes */
	char k[KV_MAX_KEY], v[400];
	uint32_t *order = malloc(N * sizeof(*order));
	ck_assert_ptr_nonnull(order);
	shuffle(order, N, 11);
	kt_init("walrus-kv", 4096);
	for (uint32_t i = 0; i < N; i++) {
		memset(v, 'a' + (int)(order[i] % 23), sizeof(v));
		put_ok(k, long_key(k, order[i]), v, sizeof(v));
	}
	kv_verify_result r;
	ck_assert_int_eq(kt_verify(&r), WALRUS_OK);
	ck_assert_uint_ge(r.internal, 300);
	ck_assert_uint_le(r.internal, KV_NODE_COPIES);
	kv_stats st0, st1;
	for (int pass = 0; pass < 2; pass++) {
		kv_get_stats(&st0);
		for (uint32_t i = 0; i < N; i++) {
			memset(v, 'a' + (int)(i % 23), sizeof(v));
			get_is(k, long_key(k, i), v, sizeof(v));
		}
		kv_get_stats(&st1);
	}
	/* The first pass copied the nodes; the second took none. */
	ck_assert_uint_eq(st1.node_copies_taken - st0.node_copies_taken, 0);
	free(order);
}
END_TEST

#ifdef WALRUS_TEST_HOOKS
/* @n gets of long_key(i), each i drawn by @pick from @seed. */
static void get_long_keys(int n, uint32_t (*pick)(uint64_t *), uint64_t seed)
{
	char k[KV_MAX_KEY];
	for (int j = 0; j < n; j++) {
		uint64_t v = pick(&seed);
		get_is(k, long_key(k, (uint32_t)v), &v, 8);
	}
}

enum { RATION_N = 16000, RATION_GETS = 8192 };

static uint32_t any_key(uint64_t *s)
{
	return (uint32_t)(kt_rand(s) % RATION_N);
}

/* Keys whose long_key sorts among the first 3000 of 1000003: one leaf's. */
static uint32_t first_leaf_key(uint64_t *s)
{
	for (;;) {
		uint32_t i = any_key(s);
		if (i * 2654435761u % 1000003u < 3000)
			return i;
	}
}

/*
 * A tree with more level-1 nodes than a backend has places for copies
 * (made small here): the clock evicts level-1 copies that random gets
 * rarely found again, and after a window of such evictions the descents
 * take one at one read in 16.  Gets that stay under one level-1 node find
 * its copy again and answer without locks, as before.
 */
START_TEST(level1_copies_rationed_when_not_found_again)
{
	kv_test_copy_places(6);
	kt_init("walrus-kv", 2048);
	char k[KV_MAX_KEY];
	for (uint64_t i = 0; i < RATION_N; i++)
		put_ok(k, long_key(k, (uint32_t)i), &i, 8);
	kv_stats st0, st1, st2;
	kv_get_stats(&st0);
	ck_assert_uint_ge(st0.height, 4);
	get_long_keys(RATION_GETS, any_key, 1);
	kv_get_stats(&st1);
	uint64_t taken = st1.node_copies_taken - st0.node_copies_taken;
	uint64_t rationed = st1.node_copies_rationed - st0.node_copies_rationed;
	ck_assert_msg(taken < RATION_GETS / 4 && rationed > RATION_GETS / 2,
	              "%lu copies taken, %lu level-1 reads without one in %d gets",
	              (unsigned long)taken, (unsigned long)rationed, RATION_GETS);
	get_long_keys(RATION_GETS, first_leaf_key, 2);
	kv_get_stats(&st2);
	ck_assert_uint_gt(st2.optimistic_reads - st1.optimistic_reads, RATION_GETS * 9 / 10);
	kv_test_copy_places(KV_NODE_COPIES);
}
END_TEST
#endif

/* ---------------------------------------------------------------- batches */

START_TEST(batch_applies_in_order)
{
	kt_init("walrus-kv", 512);
	kv_batch *b = kv_batch_new();
	wr_lsn lsn = 1;
	ck_assert_int_eq(kv_batch_commit(b, KV_SYNC, &lsn), WALRUS_OK);
	ck_assert_uint_eq(lsn, 0); /* nothing to log */
	ck_assert_int_eq(kv_batch_put(b, "a", 1, "1", 1), WALRUS_OK);
	ck_assert_int_eq(kv_batch_put(b, "b", 1, "2", 1), WALRUS_OK);
	ck_assert_int_eq(kv_batch_delete(b, "a", 1), WALRUS_OK);
	ck_assert_int_eq(kv_batch_delete(b, "zz", 2), WALRUS_OK); /* absent: no-op */
	ck_assert_int_eq(kv_batch_put(b, "b", 1, "3", 1), WALRUS_OK);
	ck_assert_uint_eq(kv_batch_count(b), 5);
	ck_assert_int_eq(kv_batch_commit(b, KV_SYNC, &lsn), WALRUS_OK);
	ck_assert_uint_gt(lsn, 0);
	ck_assert_uint_ge(wal_flushed_lsn(), lsn);
	get_absent("a", 1);
	get_is("b", 1, "3", 1);
	kv_batch_clear(b);
	ck_assert_uint_eq(kv_batch_count(b), 0);
	kv_batch_free(b);
	kv_stats st;
	kv_get_stats(&st);
	ck_assert_uint_eq(st.batches, 2);
	kt_crash_restart();
	get_absent("a", 1);
	get_is("b", 1, "3", 1);
	kt_verify_clean();
}
END_TEST

/*
 * A batch of several records: every page it changed carries the end of its
 * last record, so that no page of it can be written out (WAL before data)
 * before the whole batch is durable.  Stamped with their own record's end,
 * pages of the first records could reach the disk with the last record
 * still in the WAL buffers, and a power cut then left half a batch.
 */
START_TEST(batch_pages_carry_its_last_record)
{
	kt_init("walrus-kv", 1024);
	put_ok("a", 1, "1", 1);
	wr_lsn before = wal_insert_lsn();
	wal_stats w0, w1;
	wal_get_stats(&w0);
	kv_batch *b = kv_batch_new();
	char *v = pattern(20000, 5); /* 3 overflow pages each: 120 pages, several records */
	for (int i = 0; i < 40; i++) {
		char k[16];
		int kl = snprintf(k, sizeof(k), "big-%02d", i);
		ck_assert_int_eq(kv_batch_put(b, k, (size_t)kl, v, 20000), WALRUS_OK);
	}
	wr_lsn lsn = 0;
	ck_assert_int_eq(kv_batch_commit(b, KV_ASYNC, &lsn), WALRUS_OK);
	wal_get_stats(&w1);
	ck_assert_uint_ge(w1.records - w0.records, 3);
	smgr_rel *r;
	wr_blkno n = 0;
	ck_assert_int_eq(smgr_open(KV_REL, &r), WALRUS_OK);
	ck_assert_int_eq(smgr_nblocks(r, &n), WALRUS_OK);
	int changed = 0;
	for (wr_blkno blk = 0; blk < n; blk++) {
		int buf;
		ck_assert_int_eq(buf_read(KV_REL, blk, &buf), WALRUS_OK);
		buf_lock(buf, false);
		wr_lsn page_lsn = page_get_lsn(buf_page(buf));
		buf_unlock(buf);
		buf_release(buf);
		if (page_lsn <= before)
			continue;
		changed++;
		ck_assert_msg(page_lsn == lsn, "block %u: LSN %llx, the batch ended at %llx", blk,
		              (unsigned long long)page_lsn, (unsigned long long)lsn);
	}
	ck_assert_int_ge(changed, 120);
	free(v);
	kv_batch_free(b);
	kt_verify_clean();
}
END_TEST

/* Keys 0..n-1 with their values as stored by fill_values. */
static void check_values(uint32_t n, unsigned gen)
{
	for (uint32_t i = 0; i < n; i++) {
		char k[16], v[64];
		int kl = snprintf(k, sizeof(k), "key%05u", i);
		int vl = snprintf(v, sizeof(v), "value %u of generation %u", i, gen);
		get_is(k, (size_t)kl, v, (size_t)vl);
	}
}

/* What undo must give back of every block: the bytes below lower and from
 * upper on (the free space between is nobody's). */
static char *tree_image(uint64_t *nblocks)
{
	kv_stats st;
	kv_get_stats(&st);
	*nblocks = st.pages;
	char *img = calloc(st.pages, WR_PAGE_SIZE);
	ck_assert_ptr_nonnull(img);
	for (wr_blkno b = 0; b < st.pages; b++) {
		int buf;
		ck_assert_int_eq(buf_read(KV_REL, b, &buf), WALRUS_OK);
		const char *page = buf_page(buf);
		wr_page_header h = kvp_header(page);
		char *out = img + (size_t)b * WR_PAGE_SIZE;
		memcpy(out, page, h.lower);
		memcpy(out + h.upper, page + h.upper, WR_PAGE_SIZE - h.upper);
		/* Set when a page is written: one the small pool evicted and read
		 * again has a fresh one, one never written out a stale one. */
		memset(out + offsetof(wr_page_header, checksum), 0, sizeof(h.checksum));
		buf_release(buf);
	}
	return img;
}

/*
 * A batch that fails leaves every page as it found it, byte for byte: the
 * leaves that only took inserts (undone from their header and slots) and
 * those that then split or took other ops (undone from an image).
 */
START_TEST(failed_batch_of_inserts_restores_every_byte)
{
	enum { N = 3000 };
	kt_init("walrus-kv", 64); /* a batch may pin 16 pages */
	char v[200];
	memset(v, 'v', sizeof(v));
	uint32_t order[N / 2];
	shuffle(order, N / 2, 3);
	for (uint32_t i = 0; i < N / 2; i++) { /* random order: leaves with room */
		char k[16];
		int kl = snprintf(k, sizeof(k), "key%05u", 2 * order[i]);
		put_ok(k, (size_t)kl, v, sizeof(v));
	}
	uint64_t n0, n1;
	char *before = tree_image(&n0);
	kv_batch *b = kv_batch_new();
	/* New keys between the first 100 (more than KVW_LAZY_MAX per leaf:
	 * images; their leaves split), then one key in each of many leaves
	 * (lazy), until the pin limit stops the batch. */
	for (uint32_t i = 1; i < 100 + N / 50; i += 2) {
		uint32_t j = i < 100 ? i : 50 * (i - 99) + 1;
		char k[16];
		int kl = snprintf(k, sizeof(k), "key%05u", j);
		ck_assert_int_eq(kv_batch_put(b, k, (size_t)kl, v, sizeof(v)), WALRUS_OK);
	}
	ck_assert_int_eq(kv_batch_commit(b, KV_SYNC, NULL), WALRUS_ETOOBIG);
	kv_batch_free(b);
	kv_stats st;
	kv_get_stats(&st);
	ck_assert_uint_eq(st.batch_aborts, 1); /* it changed pages before it failed */
	char *after = tree_image(&n1);
	ck_assert_uint_eq(n1, n0);
	for (uint64_t blk = 0; blk < n0; blk++)
		ck_assert_msg(memcmp(before + blk * WR_PAGE_SIZE, after + blk * WR_PAGE_SIZE,
		                     WR_PAGE_SIZE) == 0,
		              "block %llu differs after the undo", (unsigned long long)blk);
	free(before);
	free(after);
	kt_verify_clean();
}
END_TEST

/*
 * The same for replaced values: a replace over the old item (as long or
 * shorter), one placed under upper (longer), inserts after them in the
 * same leaf, leaves whose replaces outgrow what the lazy undo keeps or
 * compact the page (undone from an image the lazy undo first takes back),
 * then one replace in each of many leaves until the pin limit stops it.
 */
START_TEST(failed_batch_of_replaces_restores_every_byte)
{
	enum { N = 3000 };
	kt_init("walrus-kv", 64); /* a batch may pin 16 pages */
	char v[300];
	memset(v, 'v', sizeof(v));
	uint32_t order[N / 2];
	shuffle(order, N / 2, 5);
	for (uint32_t i = 0; i < N / 2; i++) {
		char k[16];
		int kl = snprintf(k, sizeof(k), "key%05u", 2 * order[i]);
		put_ok(k, (size_t)kl, v, 200);
	}
	uint64_t n0, n1;
	char *before = tree_image(&n0);
	kv_batch *b = kv_batch_new();
	char w[300];
	memset(w, 'w', sizeof(w));
	static const size_t lens[] = {200, 120, 260, 0, 200, 300};
	for (uint32_t i = 0; i < 60; i++) {
		char k[16];
		int kl = snprintf(k, sizeof(k), "key%05u", 2 * i);
		ck_assert_int_eq(kv_batch_put(b, k, (size_t)kl, w, lens[i % 6]), WALRUS_OK);
		if (i % 4 == 3) { /* an insert after the replaces */
			kl = snprintf(k, sizeof(k), "key%05u", 2 * i + 1);
			ck_assert_int_eq(kv_batch_put(b, k, (size_t)kl, w, 40), WALRUS_OK);
		}
	}
	for (uint32_t i = 2; i < N / 2; i += 40) { /* one replace per leaf, far apart */
		char k[16];
		int kl = snprintf(k, sizeof(k), "key%05u", 2 * i);
		ck_assert_int_eq(kv_batch_put(b, k, (size_t)kl, w, 100), WALRUS_OK);
	}
	ck_assert_int_eq(kv_batch_commit(b, KV_SYNC, NULL), WALRUS_ETOOBIG);
	kv_batch_free(b);
	kv_stats st;
	kv_get_stats(&st);
	ck_assert_uint_eq(st.batch_aborts, 1);
	char *after = tree_image(&n1);
	ck_assert_uint_eq(n1, n0);
	for (uint64_t blk = 0; blk < n0; blk++)
		ck_assert_msg(memcmp(before + blk * WR_PAGE_SIZE, after + blk * WR_PAGE_SIZE,
		                     WR_PAGE_SIZE) == 0,
		              "block %llu differs after the undo", (unsigned long long)blk);
	for (uint32_t i = 0; i < N / 2; i++) {
		char k[16];
		int kl = snprintf(k, sizeof(k), "key%05u", 2 * i);
		get_is(k, (size_t)kl, v, 200);
	}
	free(before);
	free(after);
	kt_verify_clean();
}
END_TEST

START_TEST(batch_over_the_pin_limit_is_undone)
{
	enum { N = 3000 };
	kt_init("walrus-kv", 64); /* a batch may pin 16 pages */
	kv_batch *b = kv_batch_new();
	for (unsigned gen = 0; gen < 2; gen++) {
		kv_batch_clear(b);
		for (uint32_t i = 0; i < N; i++) {
			char k[16], v[64];
			int kl = snprintf(k, sizeof(k), "key%05u", (i * 7919) % N);
			int vl = snprintf(v, sizeof(v), "value %u of generation %u", (i * 7919) % N,
			                  gen);
			if (gen == 0)
				put_ok(k, (size_t)kl, v, (size_t)vl);
			else
				ck_assert_int_eq(kv_batch_put(b, k, (size_t)kl, v, (size_t)vl),
				                 WALRUS_OK);
		}
		if (gen == 0)
			continue;
		/* Thousands of keys all over the tree: more pages than 16. */
		ck_assert_int_eq(kv_batch_commit(b, KV_SYNC, NULL), WALRUS_ETOOBIG);
		ck_assert_ptr_nonnull(strstr(walrus_errmsg(), "quarter of shared_buffers"));
	}
	kv_stats st;
	kv_get_stats(&st);
	ck_assert_uint_eq(st.batch_aborts, 1);
	check_values(N, 0);
	kt_verify_clean();
	/* Its records are in the WAL, voided: recovery must not apply them. */
	ck_assert_int_eq(kv_put("last", 4, "x", 1, KV_SYNC), WALRUS_OK);
	kt_crash_restart();
	check_values(N, 0);
	kt_verify_clean();
	/* A value that alone needs too many pages is refused before anything changes. */
	size_t biglen = (size_t)20 * KV_OVF_CHUNK;
	char *big = pattern(biglen, 5);
	ck_assert_int_eq(kv_put("big", 3, big, biglen, KV_SYNC), WALRUS_ETOOBIG);
	kv_get_stats(&st);
	ck_assert_uint_eq(st.batch_aborts, 0); /* refused up front (a new instance's counters) */
	free(big);
	kv_batch_free(b);
}
END_TEST

/* ---------------------------------------------------------------- verify */

typedef struct problems {
	int n;
	wr_blkno blk[16];
	char msg[16][256];
} problems;

static void collect(void *arg, wr_blkno blk, const char *msg)
{
	problems *p = arg;
	if (p->n < 16) {
		p->blk[p->n] = blk;
		snprintf(p->msg[p->n], sizeof(p->msg[0]), "%s", msg);
	}
	p->n++;
}

/* A leaf in the middle of the tree (not block 0, not the root): key 1500's. */
static wr_blkno some_leaf(void)
{
	kv_rpage p;
	kv_key k = {.p = "k001500", .len = 7};
	ck_assert_int_eq(kv_descend(&k, KV_SEEK_GE, &p), WALRUS_OK);
	wr_blkno blk = p.blk;
	kv_rpage_done(&p);
	return blk;
}

START_TEST(verify_finds_a_flipped_bit)
{
	kt_init("walrus-kv", 512);
	fill(3000, 100);
	kt_checkpoint(); /* the pages are on disk and recovery will not rewrite them */
	wr_blkno leaf = some_leaf();
	ck_assert_uint_gt(leaf, 1);
	kt_stop();
	char path[4200];
	smgr_segment_path(KV_REL, 0, path, sizeof(path));
	tu_flip_bit(path, (off_t)leaf * WR_PAGE_SIZE + WR_PAGE_SIZE / 2 + 904, 2);
	kt_start();
	problems p = {0};
	ck_assert_int_eq(kv_verify(collect, &p, NULL), WALRUS_ECORRUPT);
	ck_assert_int_ge(p.n, 1);
	ck_assert_uint_eq(p.blk[0], leaf);
	ck_assert_ptr_nonnull(strstr(p.msg[0], "checksum"));
	/* Readers get the error too, not bad data. */
	void *v;
	size_t vl;
	ck_assert_int_eq(kv_get("k001500", 7, &v, &vl), WALRUS_ECORRUPT);
}
END_TEST

/* ---------------------------------------------------------------- mapped reads */

/* A value of @key's own: what a get of it must return. */
static void mapped_value(char *v, size_t vl, uint32_t i, char tag)
{
	memset(v, tag, vl);
	snprintf(v, vl, "%c%06u", tag, i);
}

/* 20000 keys in a pool of 32 buffers, all written out: most leaves are only
 * in the file. */
static void mapped_setup(void)
{
	kt_init("walrus-kv", 32);
	kv_set_mapped_reads(true);
	char k[32], v[200];
	for (uint32_t i = 0; i < 20000; i++) {
		mapped_value(v, sizeof(v), i, 'a');
		put_ok(k, (size_t)snprintf(k, sizeof(k), "k%06u", i), v, sizeof(v));
	}
	kt_checkpoint();
}

static void mapped_get_is(uint32_t i, char tag)
{
	char k[32], v[200];
	mapped_value(v, sizeof(v), i, tag);
	get_is(k, (size_t)snprintf(k, sizeof(k), "k%06u", i), v, sizeof(v));
}

START_TEST(mapped_reads_answer_from_the_file)
{
	mapped_setup();
	kv_stats st0, st1, st2;
	for (uint32_t i = 0; i < 20000; i += 7) /* takes the node copies */
		mapped_get_is(i, 'a');
	kv_get_stats(&st0);
	for (uint32_t i = 0; i < 20000; i++)
		mapped_get_is(i, 'a');
	kv_get_stats(&st1);
	/* Most leaves are in no buffer, and gets do not load them. */
	ck_assert_uint_ge(st1.mapped_reads - st0.mapped_reads, 20000 * 3 / 4);
	ck_assert_uint_eq(st1.mapped_retries, st0.mapped_retries);
	/* Off: every leaf through the pool again. */
	kv_set_mapped_reads(false);
	for (uint32_t i = 0; i < 20000; i += 3)
		mapped_get_is(i, 'a');
	kv_get_stats(&st2);
	ck_assert_uint_eq(st2.mapped_reads, st1.mapped_reads);
}
END_TEST

/* The VmFlags line of this process's mapping of @path (NULL: not mapped). */
static char *vmflags_of(const char *path, char *out, size_t len)
{
	char real[4200];
	ck_assert_ptr_nonnull(realpath(path, real));
	FILE *f = fopen("/proc/self/smaps", "r");
	ck_assert_ptr_nonnull(f);
	char line[4400];
	bool ours = false;
	char *found = NULL;
	while (found == NULL && fgets(line, sizeof(line), f) != NULL) {
		line[strcspn(line, "\n")] = 0;
		if (strncmp(line, "VmFlags:", 8) == 0) {
			if (ours && snprintf(out, len, "%s", line) > 0)
				found = out;
		} else if (strchr(line, '-') != NULL && strchr(line, '/') != NULL) {
			const char *name = strchr(line, '/'); /* a mapping's header line */
			ours = strcmp(name, real) == 0;
		}
	}
	fclose(f);
	return found;
}

/*
 * The mapping is advised random: otherwise the kernel reads read_ahead_kb
 * around every fault, which for a tree beyond memory made mapped gets 50x
 * slower than reads into the pool (8 MiB read per get on a device with
 * read_ahead_kb 8192).  VmFlags' "rr" is that advice.
 */
START_TEST(mapped_reads_advise_random)
{
	mapped_setup();
	for (uint32_t i = 0; i < 20000; i += 7)
		mapped_get_is(i, 'a');
	kv_stats st;
	kv_get_stats(&st);
	ck_assert_uint_gt(st.mapped_reads, 0);
	char path[4200], flags[256];
	smgr_segment_path(KV_REL, 0, path, sizeof(path));
	ck_assert_msg(vmflags_of(path, flags, sizeof(flags)) != NULL, "%s is not mapped", path);
	ck_assert_msg(strstr(flags, " rr") != NULL, "mapping of %s not advised random: %s", path,
	              flags);
}
END_TEST

#ifdef WALRUS_TEST_HOOKS /* kv_test_mapped_between and the mmap failpoint */
/*
 * Peeks that waited for the device prefetch the next leaves whole (one
 * request instead of a fault per system page); peeks from memory stop
 * prefetching after KV_MAP_SLOW_RUN (16) of them, and never start.
 */
START_TEST(mapped_reads_prefetch_only_when_slow)
{
	mapped_setup();
	kv_stats st0, st1, st2;
	kv_test_map_judge(0);
	for (uint32_t i = 0; i < 20000; i += 7)
		mapped_get_is(i, 'a');
	kv_get_stats(&st0);
	ck_assert_uint_gt(st0.mapped_reads, 1000);
	ck_assert_uint_eq(st0.mapped_prefetches, 0);
	/* Judged slow: from the first timed peek (one in 8) on, every peek. */
	kv_test_map_judge(1);
	for (uint32_t i = 0; i < 20000; i += 3)
		mapped_get_is(i, 'a');
	kv_get_stats(&st1);
	uint64_t mapped = st1.mapped_reads - st0.mapped_reads;
	ck_assert_uint_gt(mapped, 1000);
	ck_assert_uint_ge(st1.mapped_prefetches - st0.mapped_prefetches, mapped - 8);
	/* Fast again: at most the 16 of the run already started. */
	kv_test_map_judge(0);
	for (uint32_t i = 1; i < 20000; i += 3)
		mapped_get_is(i, 'a');
	kv_get_stats(&st2);
	ck_assert_uint_gt(st2.mapped_reads - st1.mapped_reads, 1000);
	ck_assert_uint_le(st2.mapped_prefetches - st1.mapped_prefetches, 16);
	kv_test_map_judge(-1);
}
END_TEST

static void put_b_once(void *arg)
{
	uint32_t i = *(uint32_t *)arg;
	kv_test_mapped_between(NULL, NULL);
	char k[32], v[200];
	mapped_value(v, sizeof(v), i, 'b');
	put_ok(k, (size_t)snprintf(k, sizeof(k), "k%06u", i), v, sizeof(v));
}

/*
 * A put takes the leaf into a buffer and changes it while a get reads the
 * file's older copy: the get must notice (the leaf's tag came into the
 * table) and answer the new value through the pool.
 */
START_TEST(mapped_read_overlapped_by_a_put_reads_again)
{
	mapped_setup();
	kv_stats st0, st1;
	uint32_t key = 1000;
	/* The node copies above its leaf, from gets in other leaves (a locked
	 * get would take the leaf itself into a buffer). */
	mapped_get_is(key - 300, 'a');
	mapped_get_is(key + 300, 'a');
	kv_get_stats(&st0);
	mapped_get_is(key, 'a');
	kv_get_stats(&st1);
	ck_assert_uint_eq(st1.mapped_reads,
	                  st0.mapped_reads + 1); /* the leaf is in the file only */
	kv_test_mapped_between(put_b_once, &key);
	mapped_get_is(key, 'b');
	kv_get_stats(&st0);
	ck_assert_uint_eq(st0.mapped_retries, st1.mapped_retries + 1);
	ck_assert_uint_eq(st0.mapped_reads, st1.mapped_reads);
}
END_TEST

/* A file that cannot be mapped is read the usual way, and mapped only once. */
START_TEST(mapped_reads_without_a_mapping)
{
	ck_assert_int_eq(ts_failpoint_set("mmap:ENOMEM*0"), 0);
	mapped_setup();
	for (int pass = 0; pass < 2; pass++)
		for (uint32_t i = 0; i < 20000; i += 3)
			mapped_get_is(i, 'a');
	kv_stats st;
	kv_get_stats(&st);
	ck_assert_uint_eq(st.mapped_reads, 0);
	ck_assert_uint_eq(ts_failpoint_hits(), 1);
	ck_assert_int_eq(ts_failpoint_set(NULL), 0);
}
END_TEST
#endif

/* mapped_setup, then the leaf of key 1500 (read into a buffer by the way). */
static wr_blkno mapped_setup_leaf_of_1500(void)
{
	mapped_setup();
	return some_leaf();
}

/* Gets that take the node copies (and map the file), leaving 1500's leaf alone. */
static void mapped_gets_beside_1500(void)
{
	for (uint32_t i = 0; i < 20000; i += 97)
		if (i / 50 != 1500 / 50)
			mapped_get_is(i, 'a');
}

/* A damaged leaf read through the mapping is an error, as through the pool. */
START_TEST(mapped_read_of_a_damaged_leaf_fails)
{
	wr_blkno leaf = mapped_setup_leaf_of_1500();
	kt_stop();
	char path[4200];
	smgr_segment_path(KV_REL, leaf / smgr_blocks_per_segment(), path, sizeof(path));
	tu_flip_bit(
	    path, (off_t)(leaf % smgr_blocks_per_segment()) * WR_PAGE_SIZE + WR_PAGE_SIZE / 2 + 904,
	    2);
	kt_start();
	kv_set_mapped_reads(true);
	mapped_gets_beside_1500();
	kv_stats st0, st1;
	kv_get_stats(&st0);
	void *v;
	size_t vl;
	ck_assert_int_eq(kv_get("k001500", 7, &v, &vl), WALRUS_ECORRUPT);
	kv_get_stats(&st1);
	ck_assert_uint_eq(st1.mapped_reads, st0.mapped_reads);
}
END_TEST

/*
 * A load from a mapped block past the end of its file raises SIGBUS, as a
 * read error of the device under the mapping does.  The get is an error,
 * as through the pool, and the process lives on; the relation is not read
 * through its mappings again.
 */
START_TEST(mapped_read_of_a_file_cut_short_fails)
{
	wr_blkno leaf = mapped_setup_leaf_of_1500();
	kt_stop();
	kt_start(); /* the leaf in no buffer */
	kv_set_mapped_reads(true);
	kv_stats st0, st1, st2;
	mapped_gets_beside_1500();
	kv_get_stats(&st0);
	ck_assert_uint_gt(st0.mapped_reads, 0);
	char path[4200];
	uint32_t bps = smgr_blocks_per_segment();
	smgr_segment_path(KV_REL, leaf / bps, path, sizeof(path));
	ck_assert_int_eq(truncate(path, (off_t)(leaf % bps) * WR_PAGE_SIZE), 0);
	void *v;
	size_t vl;
	ck_assert_int_eq(kv_get("k001500", 7, &v, &vl), WALRUS_EIO);
	ck_assert_ptr_nonnull(
	    strstr(walrus_errmsg(), "read only 0 of " TU_PAGE_SIZE_STRING " bytes"));
	kv_get_stats(&st1);
	ck_assert_uint_eq(st1.mapped_reads, st0.mapped_reads);
	/* The file is read the usual way from now on, not through its mapping. */
	mapped_get_is(0, 'a');
	kv_get_stats(&st2);
	ck_assert_uint_eq(st2.mapped_reads, st1.mapped_reads);
}
END_TEST

START_TEST(verify_finds_keys_out_of_order)
{
	kt_init("walrus-kv", 512);
	fill(3000, 100);
	kt_verify_clean();
	wr_blkno leaf = some_leaf();
	int buf;
	ck_assert_int_eq(buf_read(KV_REL, leaf, &buf), WALRUS_OK);
	buf_lock(buf, true);
	char *page = buf_page(buf);
	/* Swap the line pointers of two entries. */
	char *lp = page + WR_PAGE_HEADER_SIZE + (size_t)(KV_FIRST_SLOT + 3) * KV_LP_SIZE;
	char t[KV_LP_SIZE];
	memcpy(t, lp, KV_LP_SIZE);
	memcpy(lp, lp + KV_LP_SIZE, KV_LP_SIZE);
	memcpy(lp + KV_LP_SIZE, t, KV_LP_SIZE);
	buf_unlock(buf);
	buf_release(buf);
	problems p = {0};
	ck_assert_int_eq(kv_verify(collect, &p, NULL), WALRUS_ECORRUPT);
	ck_assert_int_eq(p.n, 1);
	ck_assert_uint_eq(p.blk[0], leaf);
	ck_assert_ptr_nonnull(strstr(p.msg[0], "out of order"));
	char want[32];
	snprintf(want, sizeof(want), "block %u", leaf);
	ck_assert_ptr_nonnull(strstr(p.msg[0], want));
}
END_TEST

/*
 * The writer decodes every entry of a leaf the first time it touches the
 * page in its buffer (and marks the buffer, so that later batches need
 * not): an entry damaged in memory before that is refused, not written on.
 */
START_TEST(writer_checks_a_leaf_new_to_its_buffer)
{
	kt_init("walrus-kv", 512);
	fill(3000, 100);
	kt_clean_restart(); /* every page read anew: no buffer marked */
	wr_blkno leaf = some_leaf();
	int buf;
	ck_assert_int_eq(buf_read(KV_REL, leaf, &buf), WALRUS_OK);
	ck_assert(!buf_checked(buf));
	buf_lock(buf, true);
	char *page = buf_page(buf);
	/* The last entry's key length past its item: it no longer decodes. */
	uint16_t len;
	char *item = (char *)kvp_item(page, kvp_nslots(page) - 1, &len);
	uint16_t kl = (uint16_t)(len + 1);
	memcpy(item, &kl, sizeof(kl));
	buf_unlock(buf);
	buf_release(buf);
	ck_assert_int_eq(kv_put("k001500", 7, "v", 1, KV_ASYNC), WALRUS_ECORRUPT);
	char want[48];
	snprintf(want, sizeof(want), "block %u", leaf);
	ck_assert_ptr_nonnull(strstr(walrus_errmsg(), want));
	ck_assert_ptr_nonnull(strstr(walrus_errmsg(), "not a tree node"));
}
END_TEST

static Suite *tree_suite(void)
{
	Suite *s = suite_create("kv-tree");
	TCase *t = tcase_create("tree");
	tcase_set_timeout(t, 120);
	tcase_add_test(t, put_get_replace_delete);
	tcase_add_test(t, input_limits);
	tcase_add_test(t, overflow_values_round_trip);
	tcase_add_test(t, free_list_keeps_the_file_from_growing);
	tcase_add_test(t, splits_at_every_level_and_back);
	tcase_add_test(t, sequential_load_fills_pages);
	tcase_add_test(t, rightmost_leaf_fast_path_ascending);
	tcase_add_loop_test(t, rightmost_leaf_fast_path_other_orders, 0, 2);
	tcase_add_test(t, rightmost_leaf_hint_goes_stale);
	tcase_add_test(t, rightmost_leaf_hint_check_takes_no_lock);
	tcase_add_test(t, ascending_load_grows_file_in_runs);
#ifdef WALRUS_TEST_HOOKS
	tcase_add_test(t, full_disk_while_growing);
#endif
	tcase_add_test(t, small_put_logs_the_key_count_only);
	tcase_add_test(t, random_load_shifts_before_splitting);
	tcase_add_test(t, leaves_leave_out_shared_prefixes);
	tcase_add_test(t, rightmost_leaf_prefix_meets_new_groups);
	tcase_add_test(t, queue_workload_reuses_pages);
	tcase_add_test(t, iterator_bounds_seek_next_prev);
	tcase_add_test(t, copies_search_with_tied_heads);
	tcase_add_test(t, copies_keep_every_internal_node);
#ifdef WALRUS_TEST_HOOKS
	tcase_add_test(t, level1_copies_rationed_when_not_found_again);
#endif
	tcase_add_test(t, batch_applies_in_order);
	tcase_add_test(t, batch_pages_carry_its_last_record);
	tcase_add_test(t, batch_over_the_pin_limit_is_undone);
	tcase_add_test(t, failed_batch_of_inserts_restores_every_byte);
	tcase_add_test(t, failed_batch_of_replaces_restores_every_byte);
	tcase_add_test(t, verify_finds_a_flipped_bit);
	tcase_add_test(t, verify_finds_keys_out_of_order);
	tcase_add_test(t, writer_checks_a_leaf_new_to_its_buffer);
	tcase_add_test(t, mapped_reads_answer_from_the_file);
	tcase_add_test(t, mapped_reads_advise_random);
#ifdef WALRUS_TEST_HOOKS
	tcase_add_test(t, mapped_read_overlapped_by_a_put_reads_again);
	tcase_add_test(t, mapped_reads_without_a_mapping);
	tcase_add_test(t, mapped_reads_prefetch_only_when_slow);
#endif
	tcase_add_test(t, mapped_read_of_a_damaged_leaf_fails);
	tcase_add_test(t, mapped_read_of_a_file_cut_short_fails);
	suite_add_tcase(s, t);
	TCase *big = tcase_create("big");
	tcase_set_timeout(big, 300);
	tcase_add_test(big, value_of_64_mib);
	suite_add_tcase(s, big);
	return s;
}

int main(void)
{
	return tu_run(tree_suite());
}
