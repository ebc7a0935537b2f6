/*
 * test_kv_model.c - a model-based randomized test: phases of random puts,
 * deletes and batches (keys of 1..KV_MAX_KEY bytes with NUL bytes, values up to
 * ~20 KiB, some in overflow chains) run by a child process against a small
 * pool, each phase ending in a crash (the child exits without writing its
 * dirty pages), a clean restart, a checkpoint then a crash, or nothing.
 * After each phase the tree must match an in-memory model exactly (a full
 * scan both ways, point lookups of present and absent keys) and kv_verify
 * must be clean.  Batches that fail (too many pages pinned) must change
 * nothing.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "kv/kv_int.h"
#include "kvtest.h"

#define NKEYS     4000
#define MAX_BATCH 40

/* ---------------------------------------------------------------- keys and values */

static uint16_t make_key(uint32_t kid, char *k)
{
	uint64_t s = kid * 2654435761ULL + 17;
	uint64_t r = kt_rand(&s);
	uint16_t len = r % 100 < 60   ? (uint16_t)(1 + r / 100 % 24)
	               : r % 100 < 80 ? (uint16_t)(25 + r / 100 % 200)
	                              : (uint16_t)(225 + r / 100 % (KV_MAX_KEY - 224));
	for (uint16_t i = 0; i < len; i++)
		k[i] = (char)(kt_rand(&s) >> 61); /* a few distinct bytes, NULs included */
	if (len >= 225) {
		/* Long keys share a long prefix: long separators, tall trees. */
		memset(k, 'L', (size_t)len - 6);
		k[len - 6] = (char)(kid >> 8);
		k[len - 5] = (char)kid;
	} else if (len >= 3) { /* unique enough */
		k[0] = (char)(kid >> 8);
		k[1] = (char)kid;
	}
	return len;
}

static uint32_t value_len(uint64_t r)
{
	uint32_t p = (uint32_t)(r % 100);
	r /= 100;
	return p < 50   ? (uint32_t)(r % 50)
	       : p < 80 ? (uint32_t)(50 + r % 950)
	       : p < 95 ? (uint32_t)(1000 + r % 3000)
	                : (uint32_t)(4000 + r % 16000);
}

static void make_value(uint32_t seed, uint32_t len, char *v)
{
	uint64_t s = seed * 0x9E3779B97F4A7C15ULL + 1;
	for (uint32_t i = 0; i < len; i += 8) {
		uint64_t x = kt_rand(&s);
		memcpy(v + i, &x, WR_MIN(8u, len - i));
	}
}

/* ---------------------------------------------------------------- the model */

typedef struct mentry {
	char *k, *v;
	uint16_t kl;
	uint32_t vl;
} mentry;

static mentry *model;
static size_t mn, mcap;

static size_t model_find(const char *k, uint16_t kl, bool *found)
{
	size_t lo = 0, hi = mn;
	*found = false;
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		int c = kv_cmp(model[mid].k, model[mid].kl, k, kl);
		if (c == 0) {
			*found = true;
			return mid;
		}
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

static void model_put(const char *k, uint16_t kl, const char *v, uint32_t vl)
{
	bool found;
	size_t i = model_find(k, kl, &found);
	char *vc = malloc(vl ? vl : 1);
	memcpy(vc, v, vl);
	if (found) {
		free(model[i].v);
		model[i].v = vc;
		model[i].vl = vl;
		return;
	}
	if (mn == mcap) {
		mcap = mcap ? mcap * 2 : 1024;
		model = realloc(model, mcap * sizeof(*model));
	}
	memmove(&model[i + 1], &model[i], (mn - i) * sizeof(*model));
	model[i] = (mentry){.k = malloc(kl), .v = vc, .kl = kl, .vl = vl};
	memcpy(model[i].k, k, kl);
	mn++;
}

static void model_del(const char *k, uint16_t kl)
{
	bool found;
	size_t i = model_find(k, kl, &found);
	if (!found)
		return;
	free(model[i].k);
	free(model[i].v);
	memmove(&model[i], &model[i + 1], (mn - i - 1) * sizeof(*model));
	mn--;
}

/* ---------------------------------------------------------------- operations */

typedef struct mop {
	bool put;
	uint32_t kid, vseed, vl;
} mop;

/* A commit unit: one operation (kv_put/kv_delete) or a batch. */
typedef struct unit {
	bool batch, sync;
	int nops;
	mop ops[MAX_BATCH];
} unit;

enum { END_NONE, END_CRASH, END_CLEAN, END_CKPT_CRASH };
enum { RES_OK = 1, RES_TOOBIG = 2, RES_FAILED = 3 };

static void gen_units(uint64_t *s, unit *u, int n)
{
	for (int i = 0; i < n; i++) {
		uint64_t r = kt_rand(s);
		u[i].batch = r % 10 < 3;
		u[i].sync = r / 10 % 5 == 0;
		int most = r / 50 % 10 == 0 ? MAX_BATCH : 8; /* some batches too big for the pool */
		u[i].nops = u[i].batch ? 1 + (int)(r / 500 % (uint64_t)most) : 1;
		for (int j = 0; j < u[i].nops; j++) {
			uint64_t q = kt_rand(s);
			u[i].ops[j] = (mop){.put = q % 100 < 65,
			                    .kid = (uint32_t)(q / 100 % NKEYS),
			                    .vseed = (uint32_t)(q >> 40),
			                    .vl = value_len(kt_rand(s))};
		}
	}
}

static char keybuf[KV_MAX_KEY], valbuf[20000];

static int run_unit(const unit *u)
{
	int rc;
	int d = u->sync ? KV_SYNC : KV_ASYNC;
	if (!u->batch) {
		const mop *o = &u->ops[0];
		uint16_t kl = make_key(o->kid, keybuf);
		make_value(o->vseed, o->vl, valbuf);
		rc = o->put ? kv_put(keybuf, kl, valbuf, o->vl, d) : kv_delete(keybuf, kl, d);
		return rc == WALRUS_ENOTFOUND ? WALRUS_OK : rc;
	}
	kv_batch *b = kv_batch_new();
	for (int j = 0; j < u->nops; j++) {
		const mop *o = &u->ops[j];
		uint16_t kl = make_key(o->kid, keybuf);
		make_value(o->vseed, o->vl, valbuf);
		rc = o->put ? kv_batch_put(b, keybuf, kl, valbuf, o->vl)
		            : kv_batch_delete(b, keybuf, kl);
		if (rc != WALRUS_OK)
			return rc;
	}
	rc = kv_batch_commit(b, d, NULL);
	kv_batch_free(b);
	return rc;
}

typedef struct phase {
	const unit *units;
	int n, ending;
	uint8_t *res; /* shared with the child */
} phase;

static int phase_child(void *arg)
{
	const phase *ph = arg;
	int rc = kt_child_attach(1);
	if (rc != 0)
		return rc;
	for (int i = 0; i < ph->n; i++) {
		if (ph->ending == END_CKPT_CRASH && i == ph->n / 2)
			kt_checkpoint();
		rc = run_unit(&ph->units[i]);
		ph->res[i] = rc == WALRUS_OK        ? RES_OK
		             : rc == WALRUS_ETOOBIG ? RES_TOOBIG
		                                    : RES_FAILED;
		if (ph->res[i] == RES_FAILED) {
			fprintf(stderr, "unit %d: %d %s\n", i, rc, walrus_errmsg());
			return 20;
		}
	}
	if (ph->ending == END_CRASH || ph->ending == END_CKPT_CRASH) {
		wal_flush_to(wal_insert_lsn()); /* as a last KV_SYNC commit would */
		_exit(0);                       /* dirty pages die with the pool */
	}
	if (ph->ending == END_CLEAN && buf_flush_all() != WALRUS_OK)
		return 21;
	return kt_child_done();
}

static void apply_to_model(const phase *ph)
{
	for (int i = 0; i < ph->n; i++) {
		if (ph->res[i] != RES_OK)
			continue;
		for (int j = 0; j < ph->units[i].nops; j++) {
			const mop *o = &ph->units[i].ops[j];
			uint16_t kl = make_key(o->kid, keybuf);
			make_value(o->vseed, o->vl, valbuf);
			if (o->put)
				model_put(keybuf, kl, valbuf, o->vl);
			else
				model_del(keybuf, kl);
		}
	}
}

/* ---------------------------------------------------------------- checks */

static void check_entry(kv_iter *it, size_t i)
{
	const void *k, *v;
	size_t kl, vl;
	ck_assert_msg(kv_iter_valid(it), "scan ended at %zu of %zu keys", i, mn);
	kv_iter_key(it, &k, &kl);
	kv_iter_value(it, &v, &vl);
	ck_assert_msg(kl == model[i].kl && memcmp(k, model[i].k, kl) == 0, "key %zu differs", i);
	ck_assert_msg(vl == model[i].vl && memcmp(v, model[i].v, vl) == 0, "value %zu differs", i);
}

static void check_scans(void)
{
	kv_iter *it;
	ck_assert_int_eq(kv_iter_open(NULL, 0, NULL, 0, &it), WALRUS_OK);
	for (size_t i = 0; i < mn; i++) {
		check_entry(it, i);
		ck_assert_int_eq(kv_iter_next(it), WALRUS_OK);
	}
	ck_assert(!kv_iter_valid(it));
	ck_assert_int_eq(kv_iter_seek_last(it), WALRUS_OK);
	for (size_t i = mn; i-- > 0;) {
		check_entry(it, i);
		ck_assert_int_eq(kv_iter_prev(it), WALRUS_OK);
	}
	ck_assert(!kv_iter_valid(it));
	kv_iter_close(it);
}

static void check_gets(uint64_t *s)
{
	for (int i = 0; i < 100; i++) {
		uint32_t kid = (uint32_t)(kt_rand(s) % NKEYS);
		uint16_t kl = make_key(kid, keybuf);
		bool found;
		size_t at = model_find(keybuf, kl, &found);
		void *v;
		size_t vl;
		int rc = kv_get(keybuf, kl, &v, &vl);
		ck_assert_int_eq(rc, found ? WALRUS_OK : WALRUS_ENOTFOUND);
		if (found) {
			ck_assert(vl == model[at].vl && memcmp(v, model[at].v, vl) == 0);
			free(v);
		}
	}
	kv_stats st;
	kv_get_stats(&st);
	ck_assert_uint_eq(st.keys, mn);
}

static void run_model(int nphases, int units_per_phase, uint64_t seed)
{
	unit *units = malloc(sizeof(unit) * (size_t)units_per_phase);
	uint8_t *res = mmap(NULL, (size_t)units_per_phase, PROT_READ | PROT_WRITE,
	                    MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	ck_assert(res != MAP_FAILED);
	int aborted = 0;
	kt_init("walrus-kv-model", 192); /* a batch may pin 48 pages; evictions are common */
	for (int p = 0; p < nphases; p++) {
		phase ph = {.units = units, .n = units_per_phase, .ending = p % 4, .res = res};
		gen_units(&seed, units, units_per_phase);
		memset(res, 0, (size_t)units_per_phase);
		ck_assert_int_eq(tu_wait(tu_fork(phase_child, &ph)), 0);
		apply_to_model(&ph);
		for (int i = 0; i < ph.n; i++)
			aborted += res[i] == RES_TOOBIG;
		if (ph.ending == END_CRASH || ph.ending == END_CKPT_CRASH)
			kt_crash_restart();
		else if (ph.ending == END_CLEAN)
			kt_clean_restart();
		check_scans();
		check_gets(&seed);
		kt_verify_clean();
	}
	kv_stats st;
	buf_stats bs;
	kv_get_stats(&st);
	buf_get_stats(&bs);
	if (getenv("KV_TEST_VERBOSE"))
		fprintf(
		    stderr,
		    "model: %zu keys, height %u, %llu pages (%llu free), %d batches over the pin "
		    "limit, %llu evictions\n",
		    mn, st.height, (unsigned long long)st.pages, (unsigned long long)st.free_pages,
		    aborted, (unsigned long long)bs.evictions);
	munmap(res, (size_t)units_per_phase);
	free(units);
}

START_TEST(random_operations_match_the_model)
{
	bool longm = tu_long_mode();
	const char *env = getenv("KV_TEST_SEED"); /* soak runs vary it */
	uint64_t seed = (env ? strtoull(env, NULL, 0) : 0x5eed0000u) + (uint64_t)_i;
	kt_redo_via_storage = _i == 1; /* redo on storage, as before the pool took it over */
	if (getenv("KV_TEST_VERBOSE"))
		fprintf(stderr, "model: seed %llu\n", (unsigned long long)seed);
	run_model(longm ? 200 : 24, longm ? 600 : 300, seed);
}
END_TEST

static Suite *model_suite(void)
{
	Suite *s = suite_create("kv-model");
	TCase *t = tcase_create("model");
	tcase_set_timeout(t, tu_long_mode() ? 3600 : 120);
	tcase_add_loop_test(t, random_operations_match_the_model, 0, 2);
	suite_add_tcase(s, t);
	return s;
}

int main(void)
{
	return tu_run(model_suite());
}
