/*
 * test_kv_mp.c - several processes on one tree: four writers on disjoint
 * and shared keys while a reader scans and a checkpointer writes the pool
 * out, then the final content, a crash restart and kv_verify; and atomic
 * batches under a crash in the middle of their WAL records.
 *
 * Children report failures by exit code (a libcheck assertion in a forked
 * child would not reach the runner) and print why on stderr.
 */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kv/kv_int.h"
#include "kvtest.h"

#define NW         4
#define OWN_KEYS   300
#define SHARED_KEY 100

/* ---------------------------------------------------------------- self-checking values */

typedef struct vhdr {
	uint32_t magic, w, i, keycrc, len;
} vhdr;
#define VMAGIC 0x5a5aa5a5u

static size_t make_val(char *buf, uint32_t w, uint32_t i, const char *k, size_t kl, uint32_t len)
{
	vhdr h = {VMAGIC, w, i, crc32c(0, k, kl), len};
	memcpy(buf, &h, sizeof(h));
	for (uint32_t j = sizeof(h); j < len; j++)
		buf[j] = (char)(w * 31 + i * 17 + j);
	return len;
}

/* Whether @v is a whole value written for key @k (never a torn or foreign one). */
static bool val_ok(const char *k, size_t kl, const char *v, size_t vl, vhdr *out)
{
	vhdr h;
	if (vl < sizeof(h))
		return false;
	memcpy(&h, v, sizeof(h));
	if (h.magic != VMAGIC || h.len != vl || h.keycrc != crc32c(0, k, kl) || h.w >= NW)
		return false;
	for (uint32_t j = sizeof(h); j < vl; j++)
		if (v[j] != (char)(h.w * 31 + h.i * 17 + j))
			return false;
	if (out)
		*out = h;
	return true;
}

static uint32_t val_len(uint64_t r)
{
	return r % 10 == 0 ? 9000 + (uint32_t)(r / 10 % 21000) : 24 + (uint32_t)(r / 10 % 300);
}

/* ---------------------------------------------------------------- the writers' script */

enum { W_PUT_OWN, W_DEL_OWN, W_PUT_SHARED, W_BATCH };

typedef struct wop {
	int kind;
	uint32_t key, len;
} wop;

/* Op @i of writer @w, the same in the writer and in the parent's check. */
static wop writer_op(uint32_t w, uint32_t i)
{
	uint64_t s = (w + 1) * 1000003ULL + i * 7919ULL;
	uint64_t r = kt_rand(&s);
	uint32_t p = (uint32_t)(r % 100);
	wop o = {.kind = p < 50   ? W_PUT_OWN
	                 : p < 65 ? W_DEL_OWN
	                 : p < 90 ? W_PUT_SHARED
	                          : W_BATCH,
	         .key = (uint32_t)(r / 100 % OWN_KEYS),
	         .len = val_len(kt_rand(&s))};
	if (o.kind == W_PUT_SHARED)
		o.key %= SHARED_KEY;
	return o;
}

static size_t own_key(char *k, uint32_t w, uint32_t key)
{
	return (size_t)sprintf(k, "own-%u-%04u", w, key);
}

static size_t shared_key(char *k, uint32_t key)
{
	return (size_t)sprintf(k, "shared-%03u", key);
}

/* A batch: three own puts (keys key, key+1, key+2) and a shared put. */
static int writer_batch(uint32_t w, uint32_t i, const wop *o, int d, char *v)
{
	char k[32];
	kv_batch *b = kv_batch_new();
	int rc = WALRUS_OK;
	for (uint32_t j = 0; j < 3 && rc == WALRUS_OK; j++) {
		size_t kl = own_key(k, w, (o->key + j) % OWN_KEYS);
		rc = kv_batch_put(b, k, kl, v, make_val(v, w, i, k, kl, o->len));
	}
	size_t kl = shared_key(k, o->key % SHARED_KEY);
	if (rc == WALRUS_OK)
		rc = kv_batch_put(b, k, kl, v, make_val(v, w, i, k, kl, 64));
	if (rc == WALRUS_OK)
		rc = kv_batch_commit(b, d, NULL);
	kv_batch_free(b);
	return rc;
}

static int writer_step(uint32_t w, uint32_t i, int d, char *v)
{
	char k[32];
	wop o = writer_op(w, i);
	size_t kl;
	switch (o.kind) {
	case W_PUT_OWN:
		kl = own_key(k, w, o.key);
		return kv_put(k, kl, v, make_val(v, w, i, k, kl, o.len), d);
	case W_DEL_OWN: {
		kl = own_key(k, w, o.key);
		int rc = kv_delete(k, kl, d);
		return rc == WALRUS_ENOTFOUND ? WALRUS_OK : rc;
	}
	case W_PUT_SHARED:
		kl = shared_key(k, o.key);
		return kv_put(k, kl, v, make_val(v, w, i, k, kl, o.len), d);
	default:
		return writer_batch(w, i, &o, d, v);
	}
}

typedef struct wargs {
	uint32_t w, nops;
} wargs;

static int writer(void *arg)
{
	const wargs *a = arg;
	static char v[32000];
	int rc = kt_child_attach(1 + (int)a->w);
	while (rc == 0 && atomic_load(&kt_sh->go) == 0)
		sched_yield();
	for (uint32_t i = 0; rc == 0 && i < a->nops; i++) {
		int d = i % 8 == 0 || i + 1 == a->nops ? KV_SYNC : KV_ASYNC;
		int e = writer_step(a->w, i, d, v);
		if (e != WALRUS_OK) {
			fprintf(stderr, "writer %u op %u: %s\n", a->w, i, walrus_errmsg());
			rc = 30;
		}
	}
	atomic_fetch_sub(&kt_sh->writers, 1);
	return rc != 0 ? rc : kt_child_done();
}

/* ---------------------------------------------------------------- reader and checkpointer */

#define STABLE_KEYS 200

/* Keys written before the writers start and never touched: every scan must see each once. */
static size_t stable_key(char *k, uint32_t i)
{
	return (size_t)sprintf(k, "stable-%03u", i);
}

static bool is_stable(const void *k, size_t kl)
{
	return kl == 10 && memcmp(k, "stable-", 7) == 0;
}

/* Checks one entry of a scan against the previous key (order in @dir, no repeats). */
static int scan_entry(kv_iter *it, bool fwd, char *prev, size_t *prevl, uint64_t n)
{
	const void *k, *v;
	size_t kl, vl;
	kv_iter_key(it, &k, &kl);
	kv_iter_value(it, &v, &vl);
	int c = n > 0 ? kv_cmp(prev, *prevl, k, kl) : (fwd ? -1 : 1);
	if (fwd ? c >= 0 : c <= 0) {
		fprintf(stderr, "reader: keys out of order or repeated\n");
		return -100;
	}
	if (!is_stable(k, kl) && !val_ok(k, kl, v, vl, NULL)) {
		fprintf(stderr, "reader: torn value for key %.*s\n", (int)kl, (const char *)k);
		return -101;
	}
	memcpy(prev, k, kl);
	*prevl = kl;
	return WALRUS_OK;
}

/* One full scan, forward or backward: order, whole values, every stable key once. */
static int scan_once(bool fwd)
{
	kv_iter *it;
	char prev[KV_MAX_KEY];
	size_t prevl = 0;
	uint64_t n = 0, stable = 0;
	int rc = kv_iter_open(NULL, 0, NULL, 0, &it);
	if (rc == WALRUS_OK && !fwd)
		rc = kv_iter_seek_last(it);
	for (; rc == WALRUS_OK && kv_iter_valid(it); n++) {
		const void *k;
		size_t kl;
		rc = scan_entry(it, fwd, prev, &prevl, n);
		kv_iter_key(it, &k, &kl);
		stable += is_stable(k, kl);
		if (rc == WALRUS_OK)
			rc = fwd ? kv_iter_next(it) : kv_iter_prev(it);
	}
	kv_iter_close(it);
	if (rc == WALRUS_OK && stable != STABLE_KEYS) {
		fprintf(stderr, "reader: %llu stable keys in a scan\n", (unsigned long long)stable);
		rc = -103;
	}
	return rc;
}

static int point_reads(uint64_t *s)
{
	static char v[32000];
	for (int j = 0; j < 50; j++) {
		char k[32];
		uint64_t r = kt_rand(s);
		size_t kl = own_key(k, (uint32_t)(r % NW), (uint32_t)(r / NW % OWN_KEYS)), vl;
		int rc = kv_get_into(k, kl, v, sizeof(v), &vl);
		if (rc == WALRUS_ENOTFOUND)
			continue;
		if (rc != WALRUS_OK || !val_ok(k, kl, v, vl, NULL)) {
			fprintf(stderr, "reader: get %s: %d %s\n", k, rc, walrus_errmsg());
			return -102;
		}
	}
	return WALRUS_OK;
}

static int reader(void *arg)
{
	(void)arg;
	uint64_t scans = 0, seed = 99;
	int rc = kt_child_attach(NW + 1);
	while (rc == 0 && atomic_load(&kt_sh->go) == 0)
		sched_yield();
	while (rc == 0 && (atomic_load(&kt_sh->writers) > 0 || scans < 3)) {
		rc = scan_once(scans % 2 == 0);
		if (rc == WALRUS_OK)
			rc = point_reads(&seed);
		scans++;
	}
	atomic_store(&kt_sh->counter, scans);
	if (rc != 0)
		return 40;
	return kt_child_done();
}

static int checkpointer(void *arg)
{
	(void)arg;
	int rc = kt_child_attach(NW + 2);
	while (rc == 0 && atomic_load(&kt_sh->writers) > 0) {
		kt_checkpoint();
		usleep(20000);
	}
	return rc != 0 ? rc : kt_child_done();
}

/* ---------------------------------------------------------------- final content */

static void expect_own(uint32_t w, uint32_t nops, uint32_t *last_i, bool *present)
{
	for (uint32_t i = 0; i < nops; i++) {
		wop o = writer_op(w, i);
		if (o.kind == W_PUT_OWN || o.kind == W_DEL_OWN) {
			present[o.key] = o.kind == W_PUT_OWN;
			last_i[o.key] = i;
		} else if (o.kind == W_BATCH) {
			for (uint32_t j = 0; j < 3; j++) {
				present[(o.key + j) % OWN_KEYS] = true;
				last_i[(o.key + j) % OWN_KEYS] = i;
			}
		}
	}
}

static void check_content(uint32_t nops)
{
	static char v[32000];
	char k[32];
	size_t vl;
	for (uint32_t w = 0; w < NW; w++) {
		uint32_t last_i[OWN_KEYS];
		bool present[OWN_KEYS] = {false};
		expect_own(w, nops, last_i, present);
		for (uint32_t key = 0; key < OWN_KEYS; key++) {
			size_t kl = own_key(k, w, key);
			vhdr h;
			int rc = kv_get_into(k, kl, v, sizeof(v), &vl);
			ck_assert_msg(rc == (present[key] ? WALRUS_OK : WALRUS_ENOTFOUND), "%s: %d",
			              k, rc);
			if (!present[key])
				continue;
			ck_assert(val_ok(k, kl, v, vl, &h));
			ck_assert_uint_eq(h.w, w);
			ck_assert_uint_eq(h.i, last_i[key]);
		}
	}
	for (uint32_t key = 0; key < SHARED_KEY; key++) {
		size_t kl = shared_key(k, key);
		int rc = kv_get_into(k, kl, v, sizeof(v), &vl);
		ck_assert_msg(rc == WALRUS_OK || rc == WALRUS_ENOTFOUND, "%s: %d", k, rc);
		if (rc == WALRUS_OK)
			ck_assert_msg(val_ok(k, kl, v, vl, NULL), "%s has a value nobody wrote", k);
	}
}

START_TEST(writers_reader_and_checkpoints_at_once)
{
	uint32_t nops = tu_long_mode() ? 20000 : 2500;
	wargs a[NW];
	pid_t pids[NW + 2];
	kt_init("walrus-kv-mp", 2048);
	for (uint32_t i = 0; i < STABLE_KEYS; i++) {
		char k[32];
		ck_assert_int_eq(kv_put(k, stable_key(k, i), "s", 1, KV_ASYNC), WALRUS_OK);
	}
	atomic_store(&kt_sh->writers, NW);
	for (uint32_t w = 0; w < NW; w++) {
		a[w] = (wargs){w, nops};
		pids[w] = tu_fork(writer, &a[w]);
	}
	pids[NW] = tu_fork(reader, NULL);
	pids[NW + 1] = tu_fork(checkpointer, NULL);
	atomic_store(&kt_sh->go, 1);
	for (int i = 0; i < NW + 2; i++)
		ck_assert_int_eq(tu_wait(pids[i]), 0);
	ck_assert_uint_ge(atomic_load(&kt_sh->counter), 3);
	if (getenv("KV_TEST_VERBOSE"))
		fprintf(stderr, "reader: %llu scans while %d writers ran\n",
		        (unsigned long long)atomic_load(&kt_sh->counter), NW);
	kv_stats st;
	kv_get_stats(&st);
	ck_assert_uint_ge(st.batches, (uint64_t)NW * nops);
	kt_verify_clean();
	check_content(nops);
	/* Every writer ended with a KV_SYNC commit: a crash now loses nothing. */
	kt_crash_restart();
	kt_verify_clean();
	check_content(nops);
}
END_TEST

/* ---------------------------------------------------------------- atomic batches under a crash */

/* The batch is stopped by kv_test_crash_after_records: test builds only. */
#ifdef WALRUS_TEST_HOOKS

#define BKEYS 200

static size_t bkey(char *k, uint32_t i)
{
	return (size_t)sprintf(k, "b-%03u", i);
}

/* Generation @gen of key @i: every third value in an overflow chain. */
static size_t bval(char *v, uint32_t i, uint32_t gen)
{
	size_t len = i % 3 == 0 ? 9000 + i : 40 + i % 50;
	for (size_t j = 0; j < len; j++)
		v[j] = (char)(gen * 7 + i + j);
	snprintf(v, 16, "g%u", gen);
	return len;
}

/* A batch writing generation @gen of every key, adding "new-<gen>" and deleting b-005. */
static int commit_generation(uint32_t gen)
{
	static char v[10000];
	char k[32];
	kv_batch *b = kv_batch_new();
	for (uint32_t i = 0; i < BKEYS; i++) {
		size_t kl = bkey(k, i);
		kv_batch_put(b, k, kl, v, bval(v, i, gen));
	}
	size_t kl = (size_t)sprintf(k, "new-%u", gen);
	kv_batch_put(b, k, kl, "x", 1);
	kv_batch_delete(b, "b-005", 5);
	int rc = kv_batch_commit(b, KV_SYNC, NULL);
	kv_batch_free(b);
	return rc;
}

typedef struct crash_args {
	uint32_t from, to; /* generations committed whole */
	int crash_after;   /* then one more, stopped after this many records (<= 0: from the end) */
	bool checkpoint;   /* a checkpoint before the stopped batch */
} crash_args;

static int batch_child(void *arg)
{
	const crash_args *a = arg;
	wal_stats s0, s1;
	int rc = kt_child_attach(1);
	for (uint32_t g = a->from; rc == 0 && g <= a->to; g++) {
		wal_get_stats(&s0);
		if (commit_generation(g) != WALRUS_OK)
			rc = 50;
		wal_get_stats(&s1);
	}
	/* Records of a whole batch (this process alone writes WAL), commit included. */
	int nrec = (int)(s1.records - s0.records);
	int stop = a->crash_after > 0 ? a->crash_after : nrec - 1 + a->crash_after;
	if (rc != 0 || nrec < 4 || stop < 1 || stop >= nrec)
		return rc != 0 ? rc : 52;
	if (a->checkpoint)
		kt_checkpoint();
	kv_test_crash_after_records(stop);
	commit_generation(a->to + 1);
	return 51; /* the hook should have stopped us */
}

static void check_generation(uint32_t gen)
{
	static char v[10000];
	char k[32];
	for (uint32_t i = 0; i < BKEYS; i++) {
		size_t kl = bkey(k, i), vl;
		void *got;
		size_t want = bval(v, i, gen);
		int rc = kv_get(k, kl, &got, &vl);
		if (i == 5) {
			ck_assert_int_eq(rc, WALRUS_ENOTFOUND);
			continue;
		}
		ck_assert_msg(rc == WALRUS_OK, "%s: %d", k, rc);
		ck_assert_msg(vl == want && memcmp(got, v, vl) == 0,
		              "%s is not of generation %u: \"%.3s\", %zu bytes", k, gen,
		              (const char *)got, vl);
		free(got);
	}
	for (uint32_t g = 1; g <= gen + 1; g++) {
		size_t kl = (size_t)sprintf(k, "new-%u", g), vl;
		void *got;
		int rc = kv_get(k, kl, &got, &vl);
		ck_assert_int_eq(rc, g <= gen ? WALRUS_OK : WALRUS_ENOTFOUND);
		if (rc == WALRUS_OK)
			free(got);
	}
	kt_verify_clean();
}

START_TEST(batch_is_all_or_nothing_after_a_crash)
{
	/* After the first record, the second, all but the commit record, all but two. */
	static const int points[] = {1, 2, 0, -1};
	int crash_after = points[_i % 4];
	kt_skip_redo_end = _i % 2 == 1;
	kt_redo_via_storage = _i % 4 >= 2;
	kt_init("walrus-kv-batch", 2048);
	crash_args a = {.from = 1, .to = 3, .crash_after = crash_after, .checkpoint = _i >= 4};
	ck_assert_int_eq(tu_wait(tu_fork(batch_child, &a)), KV_TEST_CRASH_EXIT);
	kt_crash_restart();
	check_generation(3);
	/* Next round: the stopped batch's records stay in the WAL before the new
	 * ones, and recovery replays them again (no checkpoint since). */
	a = (crash_args){.from = 4, .to = 5, .crash_after = points[(_i + 1) % 4]};
	ck_assert_int_eq(tu_wait(tu_fork(batch_child, &a)), KV_TEST_CRASH_EXIT);
	kt_crash_restart();
	check_generation(5);
	kt_clean_restart();
	check_generation(5);
}
END_TEST
#endif /* WALRUS_TEST_HOOKS */

static Suite *mp_suite(void)
{
	Suite *s = suite_create("kv-mp");
	TCase *t = tcase_create("mp");
	tcase_set_timeout(t, tu_long_mode() ? 1800 : 120);
	tcase_add_test(t, writers_reader_and_checkpoints_at_once);
#ifdef WALRUS_TEST_HOOKS
	tcase_add_loop_test(t, batch_is_all_or_nothing_after_a_crash, 0, 8);
#endif
	suite_add_tcase(s, t);
	return s;
}

int main(void)
{
	return tu_run(mp_suite());
}
