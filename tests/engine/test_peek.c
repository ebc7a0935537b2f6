/*
 * test_peek.c - point reads answered by a peek at the leaf (no pin, no
 * content lock; kv_tree.c lookup_optimistic over buf_peek), through
 * walrus.h.  A plain read after the first visit of a leaf is a peek
 * (kv.optimistic_reads); readers racing writers that overwrite values of one
 * fixed length see every value whole and their own key's, while the writers'
 * exclusive locks send peeks back to the locked path (kv.optimistic_retries).
 * In the threads suite: ThreadSanitizer runs the race.
 */
#include "testutil.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NKEYS    2000
#define VLEN     96 /* every value, every version */
#define NREADERS 2
#define NWRITERS 2
#define MIN_GETS 20000 /* per reader, before it may stop */
#define MAX_GETS 2000000

static const char *dir;

static void setup(void)
{
	dir = tu_tmpdir("peek");
}

static size_t key_of(char *k, uint32_t i)
{
	return (size_t)sprintf(k, "key%06u", i);
}

/* Value of key @i at @version: both numbers, then bytes derived from them. */
static void make_val(char *v, uint32_t i, uint64_t version)
{
	memcpy(v, &i, sizeof(i));
	memcpy(v + 4, &version, sizeof(version));
	for (int j = 12; j < VLEN; j++)
		v[j] = (char)((uint64_t)i * 31 + version * 7 + (uint64_t)j);
}

/* Whether @v is a whole value of key @i (of any version). */
static bool val_ok(const char *v, size_t vl, uint32_t i)
{
	uint32_t who;
	uint64_t version;
	if (vl != VLEN)
		return false;
	memcpy(&who, v, sizeof(who));
	memcpy(&version, v + 4, sizeof(version));
	for (int j = 12; j < VLEN; j++)
		if (v[j] != (char)((uint64_t)i * 31 + version * 7 + (uint64_t)j))
			return false;
	return who == i;
}

static uint64_t kv_counter(walrus *db, const char *name)
{
	char *json = NULL, pat[64];
	ck_assert_int_eq(walrus_stats(db, &json), WALRUS_OK);
	snprintf(pat, sizeof(pat), "\"%s\":", name);
	const char *kv = strstr(json, "\"kv\":");
	ck_assert_ptr_nonnull(kv);
	const char *p = strstr(kv, pat);
	ck_assert_msg(p != NULL, "no kv.%s in the statistics", name);
	uint64_t n = strtoull(p + strlen(pat), NULL, 10);
	walrus_free(json);
	return n;
}

static void load(walrus *db)
{
	char k[32], v[VLEN];
	walrus_batch *b = walrus_batch_new();
	ck_assert_ptr_nonnull(b);
	for (uint32_t i = 0; i < NKEYS; i++) {
		make_val(v, i, 0);
		ck_assert_int_eq(walrus_batch_put(b, k, key_of(k, i), v, VLEN), WALRUS_OK);
	}
	ck_assert_int_eq(walrus_batch_commit(db, b, WALRUS_ASYNC), WALRUS_OK);
	walrus_batch_free(b);
}

static void get_all(walrus *db)
{
	char k[32], v[VLEN];
	size_t vl;
	for (uint32_t i = 0; i < NKEYS; i++) {
		ck_assert_int_eq(walrus_get_into(db, k, key_of(k, i), v, sizeof(v), &vl),
		                 WALRUS_OK);
		ck_assert(val_ok(v, vl, i));
	}
}

START_TEST(plain_reads_are_peeks)
{
	walrus *db = tu_open(dir, tu_instance_opts("100ms", "8MB"));
	load(db);
	get_all(db); /* takes the copies of the internal nodes and the leaves' places */
	uint64_t before = kv_counter(db, "optimistic_reads");
	get_all(db);
	/* Nothing changes the tree now: every get of the second pass is a peek. */
	ck_assert_uint_eq(kv_counter(db, "optimistic_reads") - before, NKEYS);
	char k[32], v[VLEN];
	size_t vl;
	ck_assert_int_eq(walrus_get_into(db, "key9", 4, v, sizeof(v), &vl), WALRUS_ENOTFOUND);
	ck_assert_uint_eq(kv_counter(db, "optimistic_reads") - before, NKEYS + 1);
	ck_assert_int_eq(walrus_get_into(db, k, key_of(k, 5), v, 10, &vl), WALRUS_ETOOBIG);
	ck_assert_uint_eq(vl, VLEN);
	void *got = NULL;
	ck_assert_int_eq(walrus_get(db, k, key_of(k, 7), &got, &vl), WALRUS_OK);
	ck_assert(val_ok(got, vl, 7));
	walrus_free(got);
	tu_close_and_wait(db);
}
END_TEST

/* ---------------------------------------------------------------- the race */

typedef struct client {
	walrus *db;
	int id;
	atomic_bool *stop;
	uint64_t gets;
	int rc;
	char why[256];
} client;

static uint32_t next_rand(uint32_t *x)
{
	*x ^= *x << 13;
	*x ^= *x >> 17;
	*x ^= *x << 5;
	return *x;
}

static void *writer_main(void *arg)
{
	client *c = arg;
	char k[32], v[VLEN];
	uint32_t x = 0x9e3779b9u * (uint32_t)(c->id + 1);
	for (uint64_t version = 1; !atomic_load(c->stop) && c->rc == WALRUS_OK; version++) {
		uint32_t i = next_rand(&x) % NKEYS;
		make_val(v, i, version);
		c->rc = walrus_put(c->db, k, key_of(k, i), v, VLEN, WALRUS_ASYNC);
		if (c->rc != WALRUS_OK)
			snprintf(c->why, sizeof(c->why), "put: %s", walrus_errmsg());
	}
	return NULL;
}

/*
 * Reads until it has done MIN_GETS and the writers have sent some peek back
 * to the locked path (the counter is the state waited on; MAX_GETS only
 * bounds a case that would fail anyway).
 */
static void *reader_main(void *arg)
{
	client *c = arg;
	char k[32], v[VLEN];
	size_t vl;
	uint32_t x = 0x85ebca6bu * (uint32_t)(c->id + 1);
	for (c->gets = 0; c->gets < MAX_GETS && c->rc == WALRUS_OK; c->gets++) {
		if (c->gets >= MIN_GETS && c->gets % 1000 == 0 &&
		    kv_counter(c->db, "optimistic_retries") > 0)
			break;
		uint32_t i = next_rand(&x) % NKEYS;
		c->rc = walrus_get_into(c->db, k, key_of(k, i), v, sizeof(v), &vl);
		if (c->rc != WALRUS_OK)
			snprintf(c->why, sizeof(c->why), "get %s: %s", k, walrus_errmsg());
		else if (!val_ok(v, vl, i))
			c->rc = WALRUS_ECORRUPT;
		if (c->rc == WALRUS_ECORRUPT)
			snprintf(c->why, sizeof(c->why), "value of %s torn or another key's", k);
	}
	return NULL;
}

START_TEST(readers_racing_writers_see_whole_values)
{
	walrus *db = tu_open(dir, tu_instance_opts("100ms", "8MB"));
	load(db);
	atomic_bool stop = false;
	client cl[NREADERS + NWRITERS];
	pthread_t t[NREADERS + NWRITERS];
	for (int i = 0; i < NREADERS + NWRITERS; i++) {
		cl[i] = (client){
		    .db = tu_open(dir, tu_instance_opts("100ms", "8MB")), .id = i, .stop = &stop};
		bool writer = i >= NREADERS;
		ck_assert_int_eq(
		    pthread_create(&t[i], NULL, writer ? writer_main : reader_main, &cl[i]), 0);
	}
	for (int i = 0; i < NREADERS; i++)
		pthread_join(t[i], NULL);
	atomic_store(&stop, true);
	for (int i = NREADERS; i < NREADERS + NWRITERS; i++)
		pthread_join(t[i], NULL);
	for (int i = 0; i < NREADERS + NWRITERS; i++) {
		ck_assert_msg(cl[i].rc == WALRUS_OK, "client %d: %d %s", i, cl[i].rc, cl[i].why);
		ck_assert_int_eq(walrus_close(cl[i].db), WALRUS_OK);
	}
	ck_assert_uint_gt(kv_counter(db, "optimistic_retries"), 0);
	ck_assert_uint_gt(kv_counter(db, "optimistic_reads"), 0);
	ck_assert_int_eq(walrus_verify(db, NULL, NULL), WALRUS_OK);
	tu_close_and_wait(db);
}
END_TEST

static Suite *peek_suite(void)
{
	Suite *s = suite_create("kv-peek");
	TCase *tc = tcase_create("kv-peek");
	tcase_add_checked_fixture(tc, setup, NULL);
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, plain_reads_are_peeks);
	tcase_add_test(tc, readers_racing_writers_see_whole_values);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run(peek_suite());
}
