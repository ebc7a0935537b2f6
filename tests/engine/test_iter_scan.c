/*
 * test_iter_scan.c - the iterator contract through the public API's fast
 * path.  Most walrus_iter_next calls of a scan step inside the iterator's
 * private leaf copy without the handle check or the PANIC boundary, and
 * walrus_iter_valid/key/value read the iterator's record of its entry
 * without a call into kv; the kv suites test the iterator below that API.
 * Here scans run through walrus.h while writer threads (handles of their
 * own) insert, replace and delete keys between the scanned ones, splitting
 * leaves and leaving holes in them, with some values big enough to be
 * overflow chains: every scan must return each stable key exactly once, in
 * order, and every key with a whole value of its own.  Point reads run
 * through the same churn, whose random inserts move entries between
 * sibling leaves.  The same scans, forward and backward, over a tree many
 * times the pool with the iterators' look-ahead on (read streams of the
 * leaves the level above names, which splits make stale) under both
 * io_methods.
 */
#include "testutil.h"

#include "kv/kv.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NSTABLE  1500  /* keys written first and never touched */
#define NBIG     30000 /* the same, for a tree many times a small pool */
#define NWRITERS 2
#define NSCANS   12
#define BIGVAL   6000  /* past a page's room for an inline value: an overflow chain */
#define MAXSTEPS 20000 /* per writer: bounds the tree, so the case's time */

static const char *dir;
static int nstable;      /* stable keys of the case */
static const char *pool; /* shared_buffers of the case */
static const char *io_method;

static void setup(void)
{
	dir = tu_tmpdir("iterscan");
	nstable = NSTABLE;
	pool = "8MB";
	io_method = "sync";
}

static walrus_opts *opts(void)
{
	walrus_opts *o = tu_instance_opts("100ms", pool);
	ck_assert_int_eq(walrus_opts_set(o, "io_method", io_method), WALRUS_OK);
	return o;
}

/* ---------------------------------------------------------------- self-checking values */

typedef struct vhdr {
	uint32_t magic, keycrc, len;
} vhdr;
#define VMAGIC 0x17e45ca7u

static size_t make_val(char *buf, const char *k, size_t kl, uint32_t len, uint32_t salt)
{
	vhdr h = {VMAGIC, crc32c(0, k, kl), len};
	memcpy(buf, &h, sizeof(h));
	for (uint32_t j = sizeof(h); j < len; j++)
		buf[j] = (char)(h.keycrc + salt * 7 + j);
	return len;
}

/* Whether @v is a whole value made by make_val for key @k (not torn, not another key's). */
static bool val_ok(const char *k, size_t kl, const char *v, size_t vl)
{
	vhdr h;
	if (vl < sizeof(h))
		return false;
	memcpy(&h, v, sizeof(h));
	if (h.magic != VMAGIC || h.len != vl || h.keycrc != crc32c(0, k, kl))
		return false;
	/* The salt is unknown: every byte follows the first one's pattern. */
	char base = (char)(v[sizeof(h)] - (char)sizeof(h));
	for (uint32_t j = sizeof(h); j < vl; j++)
		if (v[j] != (char)(base + (char)j))
			return false;
	return true;
}

static size_t stable_key(char *k, int i)
{
	return (size_t)sprintf(k, "k%05d", i);
}

/* Writer @w's key number @seq, at a pseudo-random place between two stable
 * keys ("k00012" < "k00012-w1-0000007" < "k00013"). */
static size_t churn_key(char *k, int w, uint32_t seq)
{
	uint32_t h = crc32c((uint32_t)w, &seq, sizeof(seq));
	return (size_t)sprintf(k, "k%05d-w%d-%07u", (int)(h % (uint32_t)nstable), w, seq);
}

/* ---------------------------------------------------------------- writers */

typedef struct writer {
	walrus *db;
	int id;
	_Atomic uint64_t ops;
	atomic_bool done; /* stopped: told to, at MAXSTEPS, or on an error */
	atomic_bool *stop;
	int rc;
	char why[256];
	char val[BIGVAL];
} writer;

static uint32_t churn_len(uint32_t seq)
{
	return seq % 16 == 5 ? BIGVAL : 16 + crc32c(seq, "len", 3) % 400;
}

/*
 * Step @seq puts a new key, and every odd step deletes the key of step
 * seq / 2: the tree keeps growing (leaves split all over the key space) and
 * keeps losing keys inside its leaves.
 */
static int writer_step(writer *w, uint32_t seq, char *v)
{
	char k[48];
	size_t kl = churn_key(k, w->id, seq);
	size_t vl = make_val(v, k, kl, churn_len(seq), seq);
	int rc = walrus_put(w->db, k, kl, v, vl, WALRUS_ASYNC);
	if (rc == WALRUS_OK && seq % 2 == 1) {
		kl = churn_key(k, w->id, seq / 2);
		rc = walrus_delete(w->db, k, kl, WALRUS_ASYNC);
	}
	if (rc != WALRUS_OK)
		snprintf(w->why, sizeof(w->why), "%s: %s", k, walrus_errmsg());
	return rc;
}

static void *writer_main(void *arg)
{
	writer *w = arg;
	for (uint32_t seq = 0; seq < MAXSTEPS && !atomic_load(w->stop) && w->rc == WALRUS_OK;
	     seq++) {
		w->rc = writer_step(w, seq, w->val);
		atomic_fetch_add(&w->ops, 1);
	}
	atomic_store(&w->done, true);
	return NULL;
}

/* ---------------------------------------------------------------- the scan */

/* One whole forward scan; NULL if it kept the contract, else why not (in @why). */
static const char *scan_once(walrus *db, char *why, size_t cap)
{
	walrus_iter *it = NULL;
	char prev[64];
	size_t prevl = 0;
	int stable = 0, n = 0;
	int rc = walrus_iter_open(db, NULL, 0, NULL, 0, &it);
	for (; rc == WALRUS_OK && walrus_iter_valid(it); n++) {
		const void *k, *v;
		size_t kl, vl;
		walrus_iter_key(it, &k, &kl);
		walrus_iter_value(it, &v, &vl);
		int c = n == 0 ? -1 : memcmp(prev, k, kl < prevl ? kl : prevl);
		if (c > 0 || (c == 0 && prevl >= kl)) {
			snprintf(why, cap, "key %.*s after %.*s", (int)kl, (const char *)k,
			         (int)prevl, prev);
			break;
		}
		if (!val_ok(k, kl, v, vl)) {
			snprintf(why, cap, "value of %.*s (%zu bytes) is not its own, whole",
			         (int)kl, (const char *)k, vl);
			break;
		}
		if (kl > sizeof(prev)) {
			snprintf(why, cap, "a key of %zu bytes", kl);
			break;
		}
		stable += kl == 6; /* "k%05d" */
		memcpy(prev, k, kl);
		prevl = kl;
		rc = walrus_iter_next(it);
	}
	walrus_iter_close(it);
	if (rc != WALRUS_OK)
		snprintf(why, cap, "iterator: %d %s", rc, walrus_errmsg());
	else if (why[0] == '\0' && stable != nstable)
		snprintf(why, cap, "%d stable keys of %d in a scan", stable, nstable);
	return why[0] == '\0' ? NULL : why;
}

static void load_stable(walrus *db)
{
	char k[32], v[200];
	walrus_batch *b = walrus_batch_new();
	ck_assert_ptr_nonnull(b);
	for (int i = 0; i < nstable; i++) {
		size_t kl = stable_key(k, i);
		size_t vl = make_val(v, k, kl, nstable > NSTABLE ? 200 : 100, 0);
		ck_assert_int_eq(walrus_batch_put(b, k, kl, v, vl), WALRUS_OK);
		if (i % 500 == 499 || i == nstable - 1) { /* a batch pins its leaves */
			ck_assert_int_eq(walrus_batch_commit(db, b, WALRUS_ASYNC), WALRUS_OK);
			walrus_batch_clear(b);
		}
	}
	walrus_batch_free(b);
}

typedef const char *(*check_fn)(walrus *db, char *why, size_t cap);

/*
 * Runs @check NSCANS times on @db while the writers churn the tree, each
 * time after they made 500 more steps (or stopped: then on the final tree);
 * then stops them and checks the tree.
 */
static void during_churn(walrus *db, check_fn check)
{
	atomic_bool stop = false;
	writer ws[NWRITERS];
	pthread_t t[NWRITERS];
	for (int i = 0; i < NWRITERS; i++) {
		ws[i] = (writer){.db = tu_open(dir, opts()), .id = i, .stop = &stop};
		ck_assert_int_eq(pthread_create(&t[i], NULL, writer_main, &ws[i]), 0);
	}
	char why[512] = "";
	const char *bad = NULL;
	for (int s = 0; s < NSCANS && bad == NULL; s++) {
		uint64_t before = atomic_load(&ws[0].ops) + atomic_load(&ws[1].ops);
		while (atomic_load(&ws[0].ops) + atomic_load(&ws[1].ops) < before + 500 &&
		       !(atomic_load(&ws[0].done) && atomic_load(&ws[1].done)))
			sched_yield();
		bad = check(db, why, sizeof(why));
	}
	atomic_store(&stop, true);
	for (int i = 0; i < NWRITERS; i++) {
		pthread_join(t[i], NULL);
		ck_assert_msg(ws[i].rc == WALRUS_OK, "writer %d: %d %s", i, ws[i].rc, ws[i].why);
		ck_assert_int_eq(walrus_close(ws[i].db), WALRUS_OK);
	}
	ck_assert_msg(bad == NULL, "%s", why);
	ck_assert_int_eq(walrus_verify(db, NULL, NULL), WALRUS_OK);
}

START_TEST(scans_during_splits_and_deletes)
{
	walrus *db = tu_open(dir, opts());
	load_stable(db);
	during_churn(db, scan_once);
	tu_close_and_wait(db);
}
END_TEST

/* Every stable key read by walrus_get_into, whole; NULL or why not (in @why). */
static const char *get_all(walrus *db, char *why, size_t cap)
{
	char k[32], v[200];
	for (int i = 0; i < nstable; i++) {
		size_t kl = stable_key(k, i), vl = 0;
		int rc = walrus_get_into(db, k, kl, v, sizeof(v), &vl);
		if (rc != WALRUS_OK)
			snprintf(why, cap, "get %s: %d %s", k, rc, walrus_errmsg());
		else if (!val_ok(k, kl, v, vl))
			snprintf(why, cap, "value of %s (%zu bytes) is not its own, whole", k, vl);
		if (why[0] != '\0')
			return why;
	}
	return NULL;
}

/* Counter @name of section "kv" of walrus_stats. */
static uint64_t kv_stat(walrus *db, const char *name)
{
	char *json = NULL, pat[64];
	ck_assert_int_eq(walrus_stats(db, &json), WALRUS_OK);
	snprintf(pat, sizeof(pat), "\"%s\":", name);
	const char *kv = strstr(json, "\"kv\":");
	ck_assert_ptr_nonnull(kv);
	const char *p = strstr(kv, pat);
	ck_assert_ptr_nonnull(p);
	uint64_t n = strtoull(p + strlen(pat), NULL, 10);
	walrus_free(json);
	return n;
}

static uint64_t shifts(walrus *db)
{
	return kv_stat(db, "shifts");
}

/*
 * Point reads during the same churn.  The writers' random inserts fill
 * leaves that then give entries to a sibling instead of splitting (moving
 * the separator in the parent): a reader whose private copy of the parent
 * predates a move must still find each stable key, whole.
 */
START_TEST(gets_during_shifts)
{
	walrus *db = tu_open(dir, opts());
	load_stable(db);
	uint64_t shifts0 = shifts(db);
	during_churn(db, get_all);
	ck_assert_uint_gt(shifts(db), shifts0);
	tu_close_and_wait(db);
}
END_TEST

#ifdef WALRUS_TEST_HOOKS
/* One whole backward scan: each stable key once, in descending order. */
static const char *scan_back_once(walrus *db, char *why, size_t cap)
{
	walrus_iter *it = NULL;
	char prev[64];
	size_t prevl = 0;
	int stable = 0, n = 0;
	int rc = walrus_iter_open(db, NULL, 0, NULL, 0, &it);
	if (rc == WALRUS_OK)
		rc = walrus_iter_seek_last(it);
	for (; rc == WALRUS_OK && walrus_iter_valid(it); n++) {
		const void *k, *v;
		size_t kl, vl;
		walrus_iter_key(it, &k, &kl);
		walrus_iter_value(it, &v, &vl);
		int c = n == 0 ? 1 : memcmp(prev, k, kl < prevl ? kl : prevl);
		if (c < 0 || (c == 0 && prevl <= kl) || kl > sizeof(prev)) {
			snprintf(why, cap, "key %.*s before %.*s", (int)kl, (const char *)k,
			         (int)prevl, prev);
			break;
		}
		if (!val_ok(k, kl, v, vl)) {
			snprintf(why, cap, "value of %.*s (%zu bytes) is not its own, whole",
			         (int)kl, (const char *)k, vl);
			break;
		}
		stable += kl == 6;
		memcpy(prev, k, kl);
		prevl = kl;
		rc = walrus_iter_prev(it);
	}
	walrus_iter_close(it);
	if (rc != WALRUS_OK)
		snprintf(why, cap, "iterator backward: %d %s", rc, walrus_errmsg());
	else if (why[0] == '\0' && stable != nstable)
		snprintf(why, cap, "%d stable keys of %d in a backward scan", stable, nstable);
	return why[0] == '\0' ? NULL : why;
}

static const char *scan_both_ways(walrus *db, char *why, size_t cap)
{
	const char *bad = scan_once(db, why, cap);
	return bad != NULL ? bad : scan_back_once(db, why, cap);
}

/*
 * Loop over io_method (0 sync, 1 io_uring): a tree of NBIG keys (about 7
 * MiB, two level-1 nodes) in a 2 MiB pool, scanned both ways during the
 * churn with the look-ahead on from the second leaf: its plans go stale as
 * leaves split, the contract must not.  kv.scan_ahead counts the leaves
 * handed to read streams, scan_ahead_io those read or advised because the
 * pool lacked them.
 */
START_TEST(scans_looking_ahead_during_splits)
{
	nstable = NBIG;
	pool = "2MB";
	io_method = _i ? "io_uring" : "sync";
	walrus *db = tu_open(dir, opts());
	load_stable(db);
	kv_test_iter_ahead_always(true);
	/* A short scan (60 keys, 30 with 4 KiB pages: two or three leaves) pays
	 * nothing. */
	enum { SHORT = 60 * WR_PAGE_SIZE / 8192 };
	uint64_t ahead0 = kv_stat(db, "scan_ahead"), io0 = kv_stat(db, "scan_ahead_io");
	walrus_iter *it;
	char end[8];
	snprintf(end, sizeof(end), "k%05d", 100 + SHORT);
	ck_assert_int_eq(walrus_iter_open(db, "k00100", 6, end, 6, &it), WALRUS_OK);
	int n = 0;
	for (; walrus_iter_valid(it); n++)
		ck_assert_int_eq(walrus_iter_next(it), WALRUS_OK);
	walrus_iter_close(it);
	ck_assert_int_eq(n, SHORT);
	ck_assert_uint_eq(kv_stat(db, "scan_ahead"), ahead0);
	/* A bounded scan, each way, looks no further than its range's leaves
	 * (the tree's pages per key times its 5000 keys, and the one it ends
	 * in), where the window would take it 8 to 16 leaves further. */
	uint64_t leaves = kv_stat(db, "pages") * 5000 / (uint64_t)nstable + 1;
	for (int back = 0; back < 2; back++) {
		uint64_t a0 = kv_stat(db, "scan_ahead");
		ck_assert_int_eq(walrus_iter_open(db, "k10000", 6, "k15000", 6, &it), WALRUS_OK);
		if (back)
			ck_assert_int_eq(walrus_iter_seek_last(it), WALRUS_OK);
		for (n = 0; walrus_iter_valid(it); n++)
			ck_assert_int_eq(back ? walrus_iter_prev(it) : walrus_iter_next(it),
			                 WALRUS_OK);
		walrus_iter_close(it);
		ck_assert_int_eq(n, 5000);
		uint64_t issued = kv_stat(db, "scan_ahead") - a0;
		ck_assert_msg(issued > leaves / 2 && issued <= leaves,
		              "%s: %lu leaves ahead of %lu", back ? "backward" : "forward",
		              (unsigned long)issued, (unsigned long)leaves);
	}
	during_churn(db, scan_both_ways);
	kv_test_iter_ahead_always(false);
	/* Each scan crosses some 800 leaves each way: most of them came ahead. */
	ck_assert_uint_gt(kv_stat(db, "scan_ahead") - ahead0, (uint64_t)NSCANS * 2 * 500);
	ck_assert_uint_gt(kv_stat(db, "scan_ahead_io") - io0, (uint64_t)NSCANS * 100);
	tu_close_and_wait(db);
}
END_TEST
#endif

static Suite *iter_scan_suite(void)
{
	Suite *s = suite_create("iter-scan");
	TCase *tc = tcase_create("iter-scan");
	tcase_add_checked_fixture(tc, setup, NULL);
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, scans_during_splits_and_deletes);
	tcase_add_test(tc, gets_during_shifts);
#ifdef WALRUS_TEST_HOOKS
	tcase_add_loop_test(tc, scans_looking_ahead_during_splits, 0, 2);
#endif
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run(iter_scan_suite());
}
