/*
 * test_txn.c - snapshots and transactions (include/walrus.h): what a
 * snapshot sees while writers go on, the versions it holds and gives back,
 * serializable and snapshot-isolation commits (lost updates, write skew,
 * phantoms, a bank whose total never changes), and misuse.
 */
#include "testutil.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *dir;

static void setup(void)
{
	dir = tu_tmpdir("txn");
}

static walrus_opts *opts(void)
{
	return tu_instance_opts("100ms", "8MB");
}

static void put(walrus *db, const char *k, const char *v)
{
	ck_assert_int_eq(walrus_put(db, k, strlen(k), v, strlen(v), WALRUS_ASYNC), WALRUS_OK);
}

/* The value of @k as of @s (NULL: now), "-" when absent. */
static const char *at(walrus *db, walrus_snapshot *s, const char *k, char *buf, size_t cap)
{
	size_t vl;
	int rc = s ? walrus_get_into_at(db, s, k, strlen(k), buf, cap - 1, &vl)
	           : walrus_get_into(db, k, strlen(k), buf, cap - 1, &vl);
	if (rc == WALRUS_ENOTFOUND)
		return "-";
	ck_assert_msg(rc == WALRUS_OK, "get %s: %d %s", k, rc, walrus_errmsg());
	buf[vl] = '\0';
	return buf;
}

/* "k=v k=v ..." of an iterator from where it is, forward or backward. */
static void scan_text(walrus_iter *it, bool back, char *out, size_t cap)
{
	size_t n = 0;
	out[0] = '\0';
	while (walrus_iter_valid(it)) {
		const void *k, *v;
		size_t kl, vl;
		walrus_iter_key(it, &k, &kl);
		walrus_iter_value(it, &v, &vl);
		n += (size_t)snprintf(out + n, cap - n, "%s%.*s=%.*s", n ? " " : "", (int)kl,
		                      (const char *)k, (int)vl, (const char *)v);
		ck_assert_int_eq(back ? walrus_iter_prev(it) : walrus_iter_next(it), WALRUS_OK);
	}
}

/* ---------------------------------------------------------------- snapshots */

START_TEST(snapshot_sees_one_commit)
{
	walrus *db = tu_open(dir, opts());
	char b[64], scan[512];
	put(db, "a", "1");
	put(db, "b", "1");
	put(db, "d", "1");
	walrus_snapshot *s;
	ck_assert_int_eq(walrus_snapshot_take(db, &s), WALRUS_OK);
	walrus_batch *wb = walrus_batch_new();
	ck_assert_int_eq(walrus_batch_put(wb, "a", 1, "2", 1), WALRUS_OK);
	ck_assert_int_eq(walrus_batch_put(wb, "b", 1, "2", 1), WALRUS_OK);
	ck_assert_int_eq(walrus_batch_put(wb, "c", 1, "2", 1), WALRUS_OK);
	ck_assert_int_eq(walrus_batch_delete(wb, "d", 1), WALRUS_OK);
	ck_assert_int_eq(walrus_batch_commit(db, wb, WALRUS_ASYNC), WALRUS_OK);
	walrus_batch_free(wb);
	put(db, "a", "3"); /* a second change: the snapshot keeps the first's before */
	ck_assert_str_eq(at(db, s, "a", b, sizeof(b)), "1");
	ck_assert_str_eq(at(db, s, "b", b, sizeof(b)), "1");
	ck_assert_str_eq(at(db, s, "c", b, sizeof(b)), "-");
	ck_assert_str_eq(at(db, s, "d", b, sizeof(b)), "1");
	ck_assert_str_eq(at(db, NULL, "a", b, sizeof(b)), "3");
	ck_assert_str_eq(at(db, NULL, "d", b, sizeof(b)), "-");
	void *v;
	size_t vl;
	ck_assert_int_eq(walrus_get_at(db, s, "d", 1, &v, &vl), WALRUS_OK);
	ck_assert_uint_eq(vl, 1);
	walrus_free(v);
	walrus_iter *it;
	ck_assert_int_eq(walrus_iter_open_at(db, s, NULL, 0, NULL, 0, &it), WALRUS_OK);
	scan_text(it, false, scan, sizeof(scan));
	ck_assert_str_eq(scan, "a=1 b=1 d=1");
	ck_assert_int_eq(walrus_iter_seek_last(it), WALRUS_OK);
	scan_text(it, true, scan, sizeof(scan));
	ck_assert_str_eq(scan, "d=1 b=1 a=1");
	ck_assert_int_eq(walrus_iter_seek(it, "c", 1), WALRUS_OK);
	scan_text(it, false, scan, sizeof(scan));
	ck_assert_str_eq(scan, "d=1");
	walrus_iter_close(it);
	/* A range: [b, d) as of the snapshot. */
	ck_assert_int_eq(walrus_iter_open_at(db, s, "b", 1, "d", 1, &it), WALRUS_OK);
	scan_text(it, false, scan, sizeof(scan));
	ck_assert_str_eq(scan, "b=1");
	walrus_iter_close(it);
	walrus_snapshot_release(s);
	tu_close_and_wait(db);
}
END_TEST

/*
 * A scan through a snapshot over leaves where a few keys changed: the steps
 * between changed keys are taken in the iterator's leaf copy, the changed
 * ones from the versions; the result is the state at the snapshot, forward
 * and backward, and for a transaction with its own scattered writes too.
 */
START_TEST(snapshot_scan_with_scattered_changes)
{
	walrus *db = tu_open(dir, opts());
	char want[8192], got[8192], k[16], v[16];
	size_t n = 0;
	for (int i = 0; i < 300; i++) {
		snprintf(k, sizeof(k), "s%03d", i * 2);
		snprintf(v, sizeof(v), "v%d", i);
		put(db, k, v);
		n += (size_t)snprintf(want + n, sizeof(want) - n, "%s%s=%s", n ? " " : "", k, v);
	}
	walrus_snapshot *s;
	ck_assert_int_eq(walrus_snapshot_take(db, &s), WALRUS_OK);
	for (int i = 0; i < 300; i += 7) {
		snprintf(k, sizeof(k), "s%03d", i * 2);
		if (i % 2)
			put(db, k, "changed");
		else
			ck_assert_int_eq(walrus_delete(db, k, strlen(k), WALRUS_ASYNC), WALRUS_OK);
		snprintf(k, sizeof(k), "s%03d", i * 2 + 1); /* between two keys */
		put(db, k, "new");
	}
	walrus_iter *it;
	ck_assert_int_eq(walrus_iter_open_at(db, s, "s", 1, "t", 1, &it), WALRUS_OK);
	scan_text(it, false, got, sizeof(got));
	ck_assert_str_eq(got, want);
	walrus_iter_close(it);
	/* A transaction's writes over it, every 11th key. */
	walrus_txn *t;
	ck_assert_int_eq(walrus_txn_begin(db, 0, &t), WALRUS_OK);
	n = 0;
	for (int i = 0; i < 300; i++) {
		snprintf(k, sizeof(k), "s%03d", i * 2);
		bool mine = i % 11 == 0;
		if (mine)
			ck_assert_int_eq(walrus_txn_put(t, k, strlen(k), "T", 1), WALRUS_OK);
		char cur[16];
		const char *val = mine ? "T" : at(db, NULL, k, cur, sizeof(cur));
		if (strcmp(val, "-") != 0)
			n += (size_t)snprintf(want + n, sizeof(want) - n, "%s%s=%s", n ? " " : "",
			                      k, val);
		if (i % 7 == 0) { /* the keys put between */
			snprintf(k, sizeof(k), "s%03d", i * 2 + 1);
			n += (size_t)snprintf(want + n, sizeof(want) - n, " %s=new", k);
		}
	}
	ck_assert_int_eq(walrus_txn_iter_open(t, "s", 1, "t", 1, &it), WALRUS_OK);
	scan_text(it, false, got, sizeof(got));
	ck_assert_str_eq(got, want);
	walrus_iter_close(it);
	walrus_txn_free(t);
	walrus_snapshot_release(s);
	tu_close_and_wait(db);
}
END_TEST

/* A writer rewrites every key in batches whose values carry a generation. */
#define GEN_KEYS 400

/* The writer stays at most GEN_LEAD generations ahead of the scans done: on
 * a loaded machine a scan held off the CPU for a second would otherwise
 * find the version store overrun by thousands of generations
 * (WALRUS_ESNAPSHOT), which is not what this test is about. */
#define GEN_LEAD 20

typedef struct gen_writer {
	walrus *db;
	_Atomic bool stop;
	_Atomic long gens;
	_Atomic long scans; /* done by the reader, when it counts them */
	int rc;
	char why[256];
} gen_writer;

static void *rewrite_generations(void *arg)
{
	gen_writer *g = arg;
	walrus_batch *b = walrus_batch_new();
	for (long gen = 1; !atomic_load(&g->stop); gen++) {
		while (gen > (atomic_load(&g->scans) + 1) * GEN_LEAD && !atomic_load(&g->stop))
			sched_yield();
		walrus_batch_clear(b); /* a generation is one batch */
		for (int i = 0; i < GEN_KEYS; i++) {
			char k[16], v[32];
			snprintf(k, sizeof(k), "g%04d", i);
			int vl = snprintf(v, sizeof(v), "%ld:%d", gen, i);
			if (gen % 5 == 0 && i % 7 == 0)
				g->rc = walrus_batch_delete(b, k, strlen(k));
			else
				g->rc = walrus_batch_put(b, k, strlen(k), v, (size_t)vl);
		}
		g->rc = walrus_batch_commit(g->db, b, WALRUS_ASYNC);
		if (g->rc != WALRUS_OK) {
			snprintf(g->why, sizeof(g->why), "%s", walrus_errmsg());
			break;
		}
		atomic_store(&g->gens, gen);
	}
	walrus_batch_free(b);
	return NULL;
}

/* One snapshot scan: every value of one generation; the keys that generation has. */
static void scan_one_generation(walrus *db, bool back)
{
	walrus_snapshot *s;
	ck_assert_int_eq(walrus_snapshot_take(db, &s), WALRUS_OK);
	walrus_iter *it;
	ck_assert_int_eq(walrus_iter_open_at(db, s, "g", 1, "h", 1, &it), WALRUS_OK);
	if (back)
		ck_assert_int_eq(walrus_iter_seek_last(it), WALRUS_OK);
	long gen = -1;
	int n = 0;
	while (walrus_iter_valid(it)) {
		const void *v;
		size_t vl;
		walrus_iter_value(it, &v, &vl);
		long g = strtol(v, NULL, 10);
		if (gen < 0)
			gen = g;
		ck_assert_msg(g == gen, "a snapshot scan saw generations %ld and %ld", gen, g);
		n++;
		ck_assert_int_eq(back ? walrus_iter_prev(it) : walrus_iter_next(it), WALRUS_OK);
	}
	int want = gen % 5 == 0 ? GEN_KEYS - (GEN_KEYS + 6) / 7 : GEN_KEYS;
	ck_assert_msg(n == want, "generation %ld: %d keys, want %d", gen, n, want);
	/* Point gets through the same snapshot agree. */
	char b[32];
	ck_assert_int_eq(strtol(at(db, s, "g0001", b, sizeof(b)), NULL, 10), gen);
	walrus_iter_close(it);
	walrus_snapshot_release(s);
}

START_TEST(snapshot_scans_see_one_generation)
{
	walrus *db = tu_open(dir, opts());
	gen_writer g = {.db = tu_open(dir, opts())};
	pthread_t t;
	ck_assert_int_eq(pthread_create(&t, NULL, rewrite_generations, &g), 0);
	while (atomic_load(&g.gens) < 1)
		sched_yield();
	for (int i = 0; i < 120; i++) {
		scan_one_generation(db, i % 3 == 2);
		atomic_fetch_add(&g.scans, 1);
	}
	atomic_store(&g.stop, true);
	pthread_join(t, NULL);
	ck_assert_msg(g.rc == WALRUS_OK, "writer: %d %s", g.rc, g.why);
	ck_assert_int_gt(atomic_load(&g.gens), 1);
	ck_assert_int_eq(walrus_close(g.db), WALRUS_OK);
	tu_close_and_wait(db);
}
END_TEST

static int hold_and_exit(void *arg)
{
	(void)arg;
	walrus_opts *o = walrus_opts_new();
	walrus *db = NULL;
	TU_CHILD_CHECK(walrus_open(dir, o, &db) == WALRUS_OK);
	walrus_opts_free(o);
	walrus_snapshot *s;
	TU_CHILD_CHECK(walrus_snapshot_take(db, &s) == WALRUS_OK);
	exit(0); /* neither released nor closed */
}

static int hold_and_wait(void *arg)
{
	int *ready = arg;
	walrus_opts *o = walrus_opts_new();
	walrus *db = NULL;
	TU_CHILD_CHECK(walrus_open(dir, o, &db) == WALRUS_OK);
	walrus_opts_free(o);
	walrus_snapshot *s;
	TU_CHILD_CHECK(walrus_snapshot_take(db, &s) == WALRUS_OK);
	TU_CHILD_CHECK(write(ready[1], "r", 1) == 1);
	for (;;)
		pause(); /* until killed */
}

START_TEST(held_snapshot_keeps_versions_and_gives_them_back)
{
	walrus *db = tu_open(dir, opts());
	for (int i = 0; i < 50; i++) {
		char k[16];
		snprintf(k, sizeof(k), "h%02d", i);
		put(db, k, "old");
	}
	ck_assert_int_eq(tu_stat(db, "\"snapshots\"", "versions"), 0);
	walrus_snapshot *s;
	ck_assert_int_eq(walrus_snapshot_take(db, &s), WALRUS_OK);
	ck_assert_int_eq(tu_stat(db, "\"snapshots\"", "live"), 1);
	for (int i = 0; i < 50; i++) {
		char k[16];
		snprintf(k, sizeof(k), "h%02d", i);
		put(db, k, "new");
	}
	ck_assert_int_eq(tu_stat(db, "\"snapshots\"", "versions"), 50);
	ck_assert_int_gt(tu_stat(db, "\"snapshots\"", "version_bytes"), 50 * 3);
	walrus_snapshot_release(s);
	put(db, "h00", "newer"); /* a batch prunes what no snapshot needs */
	ck_assert_int_eq(tu_stat(db, "\"snapshots\"", "live"), 0);
	ck_assert_int_eq(tu_stat(db, "\"snapshots\"", "versions"), 0);
	ck_assert_int_eq(tu_stat(db, "\"snapshots\"", "version_bytes"), 0);
	/* A process that exits holding one: the supervisor releases it when it
	 * reads the detach (on its own schedule: wait for the state). */
	ck_assert_int_eq(tu_wait(tu_fork(hold_and_exit, NULL)), 0);
	while (tu_stat(db, "\"snapshots\"", "live") != 0)
		usleep(10000);
	put(db, "h01", "x");
	ck_assert_int_eq(tu_stat(db, "\"snapshots\"", "versions"), 0);
	tu_close_and_wait(db);
	/* One killed holding one: the instance restarts, and no version survives it. */
	int ready[2];
	ck_assert_int_eq(pipe(ready), 0);
	pid_t holder = tu_fork(hold_and_wait, ready);
	char c;
	ck_assert_int_eq(read(ready[0], &c, 1), 1); /* its snapshot is taken */
	db = tu_open(dir, opts());
	ck_assert_int_eq(tu_stat(db, "\"snapshots\"", "live"), 1);
	for (int i = 0; i < 20; i++)
		put(db, "h02", i % 2 ? "a" : "b");
	ck_assert_int_gt(tu_stat(db, "\"snapshots\"", "versions"), 0);
	ck_assert_int_eq(kill(holder, SIGKILL), 0);
	int st;
	ck_assert_int_eq(waitpid(holder, &st, 0), holder);
	/* This handle's next call reports the restart; a new one sees no version. */
	char b[8];
	size_t vl;
	while (walrus_get_into(db, "h02", 3, b, sizeof(b), &vl) != WALRUS_ERESTART)
		usleep(10000); /* the supervisor notices the death on its own schedule */
	(void)walrus_close(db);
	db = tu_open(dir, opts());
	ck_assert_int_eq(tu_stat(db, "\"snapshots\"", "live"), 0);
	ck_assert_int_eq(tu_stat(db, "\"snapshots\"", "versions"), 0);
	close(ready[0]);
	close(ready[1]);
	tu_close_and_wait(db);
}
END_TEST

START_TEST(full_version_store_fails_the_oldest_snapshot)
{
	walrus_opts *o = opts();
	ck_assert_int_eq(walrus_opts_set(o, "snapshot_memory", "256kB"), WALRUS_OK);
	walrus *db = tu_open(dir, o);
	char v[2000], b[64];
	memset(v, 'x', sizeof(v));
	put(db, "z0", "first");
	walrus_snapshot *s;
	ck_assert_int_eq(walrus_snapshot_take(db, &s), WALRUS_OK);
	for (int i = 0; i < 400; i++) { /* 800 kB of "before" values, the ring holds 256 */
		char k[16];
		snprintf(k, sizeof(k), "z%d", i % 50);
		ck_assert_int_eq(walrus_put(db, k, strlen(k), v, sizeof(v), WALRUS_ASYNC),
		                 WALRUS_OK);
	}
	size_t vl;
	ck_assert_int_eq(walrus_get_into_at(db, s, "z0", 2, b, sizeof(b), &vl), WALRUS_ESNAPSHOT);
	ck_assert_ptr_nonnull(strstr(walrus_errmsg(), "snapshot too old"));
	ck_assert_int_gt(tu_stat(db, "\"snapshots\"", "versions_dropped"), 0);
	walrus_snapshot_release(s);
	/* A new snapshot works. */
	ck_assert_int_eq(walrus_snapshot_take(db, &s), WALRUS_OK);
	ck_assert_int_eq(walrus_get_into_at(db, s, "z0", 2, v, sizeof(v), &vl), WALRUS_OK);
	walrus_snapshot_release(s);
	tu_close_and_wait(db);
}
END_TEST

START_TEST(old_snapshot_threshold_fails_reads)
{
	walrus_opts *o = opts();
	ck_assert_int_eq(walrus_opts_set(o, "old_snapshot_threshold", "1s"), WALRUS_OK);
	walrus *db = tu_open(dir, o);
	put(db, "k", "v");
	walrus_snapshot *s;
	ck_assert_int_eq(walrus_snapshot_take(db, &s), WALRUS_OK);
	char b[8];
	size_t vl;
	ck_assert_int_eq(walrus_get_into_at(db, s, "k", 1, b, sizeof(b), &vl), WALRUS_OK);
	/* Wait on the snapshot's age, as the statistics give it. */
	while (tu_stat(db, "\"snapshots\"", "oldest_age_s") < 2)
		usleep(20000);
	ck_assert_int_eq(walrus_get_into_at(db, s, "k", 1, b, sizeof(b), &vl), WALRUS_ESNAPSHOT);
	ck_assert_ptr_nonnull(strstr(walrus_errmsg(), "old_snapshot_threshold"));
	walrus_snapshot_release(s);
	tu_close_and_wait(db);
}
END_TEST

/* ---------------------------------------------------------------- transactions */

/* Runs @fn in a transaction until it commits; the retries. */
typedef int (*txn_body)(walrus_txn *t, void *arg);

static long run_txn(walrus *db, int flags, txn_body fn, void *arg, int commit_flags)
{
	for (long tries = 0;; tries++) {
		walrus_txn *t;
		int rc = walrus_txn_begin(db, flags, &t);
		if (rc != WALRUS_OK)
			return -1000 + rc;
		rc = fn(t, arg);
		if (rc == WALRUS_OK)
			rc = walrus_txn_commit(t, commit_flags);
		walrus_txn_free(t);
		if (rc == WALRUS_OK)
			return tries;
		if (rc != WALRUS_ECONFLICT)
			return -1000 + rc;
	}
}

static int increment(walrus_txn *t, void *arg)
{
	const char *k = arg;
	char b[32];
	size_t vl;
	long n = 0;
	int rc = walrus_txn_get_into(t, k, strlen(k), b, sizeof(b) - 1, &vl);
	if (rc == WALRUS_OK) {
		b[vl] = '\0';
		n = strtol(b, NULL, 10);
	} else if (rc != WALRUS_ENOTFOUND) {
		return rc;
	}
	int len = snprintf(b, sizeof(b), "%ld", n + 1);
	return walrus_txn_put(t, k, strlen(k), b, (size_t)len);
}

#define INC_THREADS 8

typedef struct incr {
	int n;
	long retries;
	int rc;
} incr;

static void *incrementer(void *arg)
{
	incr *c = arg;
	walrus *db = NULL;
	walrus_opts *o = walrus_opts_new();
	c->rc = walrus_open(dir, o, &db);
	walrus_opts_free(o);
	for (int i = 0; c->rc == WALRUS_OK && i < c->n; i++) {
		long r = run_txn(db, 0, increment, "counter", WALRUS_ASYNC);
		if (r < 0)
			c->rc = (int)(r + 1000);
		else
			c->retries += r;
	}
	if (db != NULL)
		(void)walrus_close(db);
	return NULL;
}

START_TEST(no_lost_update)
{
	walrus *db = tu_open(dir, opts());
	int per = 10000;
	pthread_t t[INC_THREADS];
	incr c[INC_THREADS];
	for (int i = 0; i < INC_THREADS; i++) {
		c[i] = (incr){.n = per};
		ck_assert_int_eq(pthread_create(&t[i], NULL, incrementer, &c[i]), 0);
	}
	long retries = 0;
	for (int i = 0; i < INC_THREADS; i++) {
		pthread_join(t[i], NULL);
		ck_assert_msg(c[i].rc == WALRUS_OK, "thread %d: %d", i, c[i].rc);
		retries += c[i].retries;
	}
	char b[32];
	ck_assert_int_eq(strtol(at(db, NULL, "counter", b, sizeof(b)), NULL, 10),
	                 (long)INC_THREADS * per);
	ck_assert_int_gt(retries, 0); /* they did conflict */
	tu_close_and_wait(db);
}
END_TEST

/* The on-call doctors: each reads both, and goes off call if the other is on. */
static int go_off_call(walrus_txn *t, const char *me, const char *other)
{
	char b[8];
	size_t vl;
	int rc = walrus_txn_get_into(t, other, strlen(other), b, sizeof(b), &vl);
	if (rc != WALRUS_OK)
		return rc;
	rc = walrus_txn_get_into(t, me, strlen(me), b, sizeof(b), &vl);
	if (rc != WALRUS_OK)
		return rc;
	return walrus_txn_put(t, me, strlen(me), "off", 3);
}

static void write_skew(walrus *db, int flags, int *a_rc, int *b_rc)
{
	put(db, "alice", "on");
	put(db, "bob", "on");
	walrus_txn *a, *b;
	ck_assert_int_eq(walrus_txn_begin(db, flags, &a), WALRUS_OK);
	ck_assert_int_eq(walrus_txn_begin(db, flags, &b), WALRUS_OK);
	ck_assert_int_eq(go_off_call(a, "alice", "bob"), WALRUS_OK);
	ck_assert_int_eq(go_off_call(b, "bob", "alice"), WALRUS_OK);
	*a_rc = walrus_txn_commit(a, WALRUS_ASYNC);
	*b_rc = walrus_txn_commit(b, WALRUS_ASYNC);
	walrus_txn_free(a);
	walrus_txn_free(b);
}

START_TEST(write_skew_serializable_refuses_snapshot_allows)
{
	walrus *db = tu_open(dir, opts());
	int a, b;
	char v[8];
	write_skew(db, 0, &a, &b);
	ck_assert_int_eq(a, WALRUS_OK);
	ck_assert_int_eq(b, WALRUS_ECONFLICT);
	ck_assert_str_eq(at(db, NULL, "bob", v, sizeof(v)), "on");
	write_skew(db, WALRUS_TXN_SNAPSHOT, &a, &b);
	ck_assert_int_eq(a, WALRUS_OK);
	ck_assert_int_eq(b, WALRUS_OK); /* both off call: snapshot isolation allows it */
	ck_assert_str_eq(at(db, NULL, "alice", v, sizeof(v)), "off");
	ck_assert_str_eq(at(db, NULL, "bob", v, sizeof(v)), "off");
	tu_close_and_wait(db);
}
END_TEST

/* T iterates [p, q), then a commit inserts into it: T's commit conflicts. */
static int phantom(walrus *db, const char *insert)
{
	walrus_txn *t;
	ck_assert_int_eq(walrus_txn_begin(db, 0, &t), WALRUS_OK);
	walrus_iter *it;
	ck_assert_int_eq(walrus_txn_iter_open(t, "p", 1, "q", 1, &it), WALRUS_OK);
	int n = 0;
	while (walrus_iter_valid(it)) {
		n++;
		ck_assert_int_eq(walrus_iter_next(it), WALRUS_OK);
	}
	walrus_iter_close(it);
	ck_assert_int_eq(walrus_txn_put(t, "count", 5, n ? "some" : "none", 4), WALRUS_OK);
	put(db, insert, "x");
	int rc = walrus_txn_commit(t, WALRUS_ASYNC);
	walrus_txn_free(t);
	return rc;
}

START_TEST(phantom_insert_conflicts)
{
	walrus *db = tu_open(dir, opts());
	put(db, "o1", "x");
	ck_assert_int_eq(phantom(db, "r1"), WALRUS_OK);        /* outside the range */
	ck_assert_int_eq(phantom(db, "p5"), WALRUS_ECONFLICT); /* inside it */
	ck_assert_ptr_nonnull(strstr(walrus_errmsg(), "iterated over"));
	tu_close_and_wait(db);
}
END_TEST

START_TEST(reads_see_own_writes)
{
	walrus *db = tu_open(dir, opts());
	put(db, "a", "1");
	put(db, "c", "1");
	walrus_txn *t;
	ck_assert_int_eq(walrus_txn_begin(db, 0, &t), WALRUS_OK);
	ck_assert_int_eq(walrus_txn_put(t, "b", 1, "2", 1), WALRUS_OK);
	ck_assert_int_eq(walrus_txn_delete(t, "c", 1), WALRUS_OK);
	char b[8], scan[256];
	size_t vl;
	ck_assert_int_eq(walrus_txn_get_into(t, "b", 1, b, sizeof(b), &vl), WALRUS_OK);
	ck_assert_int_eq(walrus_txn_get_into(t, "c", 1, b, sizeof(b), &vl), WALRUS_ENOTFOUND);
	walrus_iter *it;
	ck_assert_int_eq(walrus_txn_iter_open(t, NULL, 0, NULL, 0, &it), WALRUS_OK);
	scan_text(it, false, scan, sizeof(scan));
	ck_assert_str_eq(scan, "a=1 b=2");
	walrus_iter_close(it);
	/* Nobody else sees them before the commit. */
	ck_assert_str_eq(at(db, NULL, "b", b, sizeof(b)), "-");
	ck_assert_int_eq(walrus_txn_commit(t, 0), WALRUS_OK);
	walrus_txn_free(t);
	ck_assert_str_eq(at(db, NULL, "b", b, sizeof(b)), "2");
	ck_assert_str_eq(at(db, NULL, "c", b, sizeof(b)), "-");
	tu_close_and_wait(db);
}
END_TEST

/* ---------------------------------------------------------------- leaf hints */

/* A counter of walrus_stats's "kv" object. */
static uint64_t kv_stat(walrus *db, const char *name)
{
	return (uint64_t)tu_stat(db, "\"kv\":", name);
}

#define HINT_KEYS 2000

/* Keys h00000, h00002, ... in a scattered order: leaves with room. */
static void load_even_keys(walrus *db)
{
	for (int i = 0; i < HINT_KEYS; i++) {
		char k[16];
		snprintf(k, sizeof(k), "h%05d", 2 * ((i * 7919) % HINT_KEYS));
		put(db, k, "a value of forty bytes, more or less....");
	}
}

static void txn_read(walrus_txn *t, const char *k, int want)
{
	char b[64];
	size_t vl;
	ck_assert_int_eq(walrus_txn_get_into(t, k, strlen(k), b, sizeof(b), &vl), want);
}

static void txn_write(walrus_txn *t, const char *k, const char *v)
{
	ck_assert_int_eq(walrus_txn_put(t, k, strlen(k), v, strlen(v)), WALRUS_OK);
}

/*
 * A transaction's put of a key it read goes to the leaf the read found,
 * without a descent (kv.hint_hits): a replace, and an insert where the
 * read found the key missing.  In the same batch, an insert that moved
 * the next key's slot after its read sends that key's put down the
 * descent, which puts it where it is.
 */
START_TEST(txn_puts_go_to_the_leaves_their_reads_found)
{
	walrus *db = tu_open(dir, opts());
	load_even_keys(db);
	uint64_t h0 = kv_stat(db, "hint_hits");
	walrus_txn *t;
	ck_assert_int_eq(walrus_txn_begin(db, 0, &t), WALRUS_OK);
	txn_read(t, "h01000", WALRUS_OK);
	txn_read(t, "h01001", WALRUS_ENOTFOUND);
	txn_read(t, "h03000", WALRUS_OK);
	txn_write(t, "h01000", "x");
	txn_write(t, "h01001", "y");
	txn_write(t, "h03000", "z");
	ck_assert_int_eq(walrus_txn_commit(t, 0), WALRUS_OK);
	walrus_txn_free(t);
	ck_assert_uint_eq(kv_stat(db, "hint_hits") - h0, 3);
	char b[64];
	ck_assert_str_eq(at(db, NULL, "h01000", b, sizeof(b)), "x");
	ck_assert_str_eq(at(db, NULL, "h01001", b, sizeof(b)), "y");
	ck_assert_str_eq(at(db, NULL, "h03000", b, sizeof(b)), "z");
	/* h01003 goes in at h01004's slot, then h01004's put finds another key there. */
	ck_assert_int_eq(walrus_txn_begin(db, 0, &t), WALRUS_OK);
	txn_read(t, "h01003", WALRUS_ENOTFOUND);
	txn_read(t, "h01004", WALRUS_OK);
	txn_write(t, "h01003", "3");
	txn_write(t, "h01004", "4");
	ck_assert_int_eq(walrus_txn_commit(t, 0), WALRUS_OK);
	walrus_txn_free(t);
	ck_assert_uint_eq(kv_stat(db, "hint_hits") - h0, 4);
	ck_assert_str_eq(at(db, NULL, "h01003", b, sizeof(b)), "3");
	ck_assert_str_eq(at(db, NULL, "h01004", b, sizeof(b)), "4");
	ck_assert_str_eq(at(db, NULL, "h01002", b, sizeof(b)),
	                 "a value of forty bytes, more or less....");
	ck_assert_int_eq(walrus_verify(db, NULL, NULL), WALRUS_OK);
	tu_close_and_wait(db);
}
END_TEST

/* Inserts @n keys h00999-NNN and h01000-NNN (from @from) around h01000. */
static void insert_around(walrus *db, int from, int n)
{
	for (int i = from; i < from + n; i++) {
		char k[32];
		snprintf(k, sizeof(k), "h%05d-%03d", i % 2 ? 999 : 1000, i);
		put(db, k, "another value of forty bytes or so......");
	}
}

/* A transaction reads h01000, @n keys come in around it (no conflict),
 * then it writes h01000 = @v: the put must not take the read's leaf. */
static void write_after_inserts(walrus *db, int from, int n, const char *v)
{
	walrus_txn *t;
	ck_assert_int_eq(walrus_txn_begin(db, 0, &t), WALRUS_OK);
	txn_read(t, "h01000", WALRUS_OK);
	insert_around(db, from, n);
	uint64_t h0 = kv_stat(db, "hint_hits");
	txn_write(t, "h01000", v);
	ck_assert_int_eq(walrus_txn_commit(t, 0), WALRUS_OK);
	walrus_txn_free(t);
	ck_assert_uint_eq(kv_stat(db, "hint_hits"), h0);
	char b[64];
	ck_assert_str_eq(at(db, NULL, "h01000", b, sizeof(b)), v);
}

/*
 * The leaf a transaction's read found changes before its commit: other
 * keys come in before the one it read (its slot moves), then enough to
 * split the leaf.  The page is not what the read saw, so the put descends
 * and replaces the key where it is now, and no other key at its old slot.
 */
START_TEST(txn_put_descends_when_its_leaf_changed_or_split)
{
	walrus *db = tu_open(dir, opts());
	load_even_keys(db);
	write_after_inserts(db, 1, 6, "new"); /* odd: h00999-NNN, before h01000 */
	uint64_t splits0 = kv_stat(db, "splits");
	write_after_inserts(db, 10, 400, "newer");
	ck_assert_uint_gt(kv_stat(db, "splits"), splits0);
	char b[64];
	for (int i = 1; i < 410; i++) {
		char k[32];
		snprintf(k, sizeof(k), "h%05d-%03d", i % 2 ? 999 : 1000, i);
		if (i < 7 ? i % 2 == 1 : i >= 10)
			ck_assert_str_eq(at(db, NULL, k, b, sizeof(b)),
			                 "another value of forty bytes or so......");
	}
	ck_assert_str_eq(at(db, NULL, "h00998", b, sizeof(b)),
	                 "a value of forty bytes, more or less....");
	ck_assert_str_eq(at(db, NULL, "h01002", b, sizeof(b)),
	                 "a value of forty bytes, more or less....");
	ck_assert_int_eq(walrus_verify(db, NULL, NULL), WALRUS_OK);
	tu_close_and_wait(db);
}
END_TEST

/* A counter of walrus_stats's "snapshots" object. */
static uint64_t snap_stat(walrus *db, const char *name)
{
	return (uint64_t)tu_stat(db, "\"snapshots\":", name);
}

/*
 * A transaction whose snapshot is the only live one commits without noting
 * versions: nobody could read them.  With another transaction's snapshot
 * live, its commit notes them, and the other still reads the value it
 * began with and conflicts on it.
 */
START_TEST(commit_notes_versions_only_for_other_snapshots)
{
	walrus *db = tu_open(dir, opts());
	put(db, "a", "1");
	uint64_t n0 = snap_stat(db, "versions_noted");
	walrus_txn *t, *u;
	ck_assert_int_eq(walrus_txn_begin(db, 0, &t), WALRUS_OK);
	txn_read(t, "a", WALRUS_OK);
	txn_write(t, "a", "2");
	ck_assert_int_eq(walrus_txn_commit(t, 0), WALRUS_OK);
	walrus_txn_free(t);
	ck_assert_uint_eq(snap_stat(db, "versions_noted"), n0);
	ck_assert_int_eq(walrus_txn_begin(db, 0, &t), WALRUS_OK);
	ck_assert_int_eq(walrus_txn_begin(db, 0, &u), WALRUS_OK);
	txn_write(t, "a", "3");
	ck_assert_int_eq(walrus_txn_commit(t, 0), WALRUS_OK);
	walrus_txn_free(t);
	ck_assert_uint_eq(snap_stat(db, "versions_noted"), n0 + 1);
	char b[8];
	size_t vl;
	ck_assert_int_eq(walrus_txn_get_into(u, "a", 1, b, sizeof(b), &vl), WALRUS_OK);
	ck_assert_int_eq(vl, 1);
	ck_assert_int_eq(b[0], '2');
	txn_write(u, "a", "4");
	ck_assert_int_eq(walrus_txn_commit(u, 0), WALRUS_ECONFLICT);
	walrus_txn_free(u);
	ck_assert_str_eq(at(db, NULL, "a", b, sizeof(b)), "3");
	tu_close_and_wait(db);
}
END_TEST

/* ---------------------------------------------------------------- the bank */

#define ACCOUNTS    20
#define BANK_TOTAL  (ACCOUNTS * 1000L)
#define BANK_MOVERS 8
#define BANK_ADDERS 2

typedef struct bank {
	_Atomic bool stop;
	_Atomic long transfers, sums;
	_Atomic int errors;
	char why[256];
} bank;

static bank *Bp; /* shared with the mover processes (MAP_SHARED) */
#define B (*Bp)

static void account(int i, char *k)
{
	snprintf(k, 16, "acct%02d", i);
}

static void bank_fail(const char *what, int rc)
{
	if (atomic_fetch_add(&B.errors, 1) == 0)
		snprintf(B.why, sizeof(B.why), "%s: %d %s", what, rc, walrus_errmsg());
}

typedef struct xfer {
	int from, to;
	long amount;
} xfer;

static int read_balance(walrus_txn *t, int i, long *bal)
{
	char k[16], b[32];
	size_t vl;
	account(i, k);
	int rc = walrus_txn_get_into(t, k, strlen(k), b, sizeof(b) - 1, &vl);
	if (rc == WALRUS_OK) {
		b[vl] = '\0';
		*bal = strtol(b, NULL, 10);
	}
	return rc;
}

static int write_balance(walrus_txn *t, int i, long bal)
{
	char k[16], b[32];
	account(i, k);
	int len = snprintf(b, sizeof(b), "%ld", bal);
	return walrus_txn_put(t, k, strlen(k), b, (size_t)len);
}

static int transfer(walrus_txn *t, void *arg)
{
	xfer *x = arg;
	long a, b;
	int rc = read_balance(t, x->from, &a);
	if (rc == WALRUS_OK)
		rc = read_balance(t, x->to, &b);
	if (rc != WALRUS_OK || a < x->amount)
		return rc;
	rc = write_balance(t, x->from, a - x->amount);
	return rc == WALRUS_OK ? write_balance(t, x->to, b + x->amount) : rc;
}

static void *mover(void *arg)
{
	unsigned seed = (unsigned)(uintptr_t)arg;
	walrus *db = NULL;
	walrus_opts *o = walrus_opts_new();
	int rc = walrus_open(dir, o, &db);
	walrus_opts_free(o);
	if (rc != WALRUS_OK) {
		bank_fail("open", rc);
		return NULL;
	}
	while (!atomic_load(&B.stop)) {
		xfer x = {.from = rand_r(&seed) % ACCOUNTS, .amount = rand_r(&seed) % 50};
		x.to = (x.from + 1 + rand_r(&seed) % (ACCOUNTS - 1)) % ACCOUNTS;
		long r =
		    run_txn(db, 0, transfer, &x, rand_r(&seed) % 4 ? WALRUS_ASYNC : WALRUS_SYNC);
		if (r < 0) {
			bank_fail("transfer", (int)(r + 1000));
			break;
		}
		atomic_fetch_add(&B.transfers, 1);
	}
	(void)walrus_close(db);
	return NULL;
}

/* The total through a snapshot (odd calls) or a read-only transaction. */
static long bank_sum(walrus *db, bool use_txn)
{
	walrus_snapshot *s = NULL;
	walrus_txn *t = NULL;
	int rc = use_txn ? walrus_txn_begin(db, 0, &t) : walrus_snapshot_take(db, &s);
	if (rc != WALRUS_OK) {
		bank_fail("begin", rc);
		return -1;
	}
	long sum = 0;
	for (int i = 0; i < ACCOUNTS && rc == WALRUS_OK; i++) {
		char k[16], b[32];
		size_t vl;
		account(i, k);
		rc = use_txn ? walrus_txn_get_into(t, k, strlen(k), b, sizeof(b) - 1, &vl)
		             : walrus_get_into_at(db, s, k, strlen(k), b, sizeof(b) - 1, &vl);
		if (rc == WALRUS_OK) {
			b[vl] = '\0';
			sum += strtol(b, NULL, 10);
		}
	}
	if (rc != WALRUS_OK)
		bank_fail("sum", rc);
	if (use_txn) {
		int crc = walrus_txn_commit(t, 0);
		if (crc != WALRUS_OK)
			bank_fail("read-only commit", crc);
		walrus_txn_free(t);
	} else {
		walrus_snapshot_release(s);
	}
	return sum;
}

static void *adder(void *arg)
{
	(void)arg;
	walrus *db = NULL;
	walrus_opts *o = walrus_opts_new();
	int rc = walrus_open(dir, o, &db);
	walrus_opts_free(o);
	if (rc != WALRUS_OK) {
		bank_fail("open", rc);
		return NULL;
	}
	for (long n = 0; !atomic_load(&B.stop); n++) {
		long sum = bank_sum(db, n % 2);
		if (sum != BANK_TOTAL && atomic_load(&B.errors) == 0) {
			char msg[64];
			snprintf(msg, sizeof(msg), "a sum was %ld", sum);
			bank_fail(msg, 0);
		}
		atomic_fetch_add(&B.sums, 1);
	}
	(void)walrus_close(db);
	return NULL;
}

/* A process of movers too, each transfer through its own handle. */
static int mover_process(void *arg)
{
	(void)mover(arg);
	return atomic_load(&B.errors) == 0 ? 0 : 3;
}

START_TEST(bank_total_holds)
{
	walrus *db = tu_open(dir, opts());
	Bp = mmap(NULL, sizeof(bank), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	ck_assert_ptr_ne(Bp, MAP_FAILED);
	for (int i = 0; i < ACCOUNTS; i++) {
		char k[16];
		account(i, k);
		put(db, k, "1000");
	}
	long want = tu_long_mode() ? 40000 : 6000;
	pthread_t mv[BANK_MOVERS], ad[BANK_ADDERS];
	pid_t procs[4];
	for (int i = 0; i < 4; i++)
		procs[i] = tu_fork(mover_process, (void *)(uintptr_t)(1000 + i));
	for (int i = 0; i < BANK_MOVERS; i++)
		ck_assert_int_eq(pthread_create(&mv[i], NULL, mover, (void *)(uintptr_t)(i + 1)),
		                 0);
	for (int i = 0; i < BANK_ADDERS; i++)
		ck_assert_int_eq(pthread_create(&ad[i], NULL, adder, NULL), 0);
	while (atomic_load(&B.transfers) < want && atomic_load(&B.errors) == 0)
		usleep(10000);
	atomic_store(&B.stop, true); /* the processes too: B is shared */
	for (int i = 0; i < BANK_MOVERS; i++)
		pthread_join(mv[i], NULL);
	for (int i = 0; i < BANK_ADDERS; i++)
		pthread_join(ad[i], NULL);
	for (int i = 0; i < 4; i++)
		ck_assert_int_eq(tu_wait(procs[i]), 0);
	ck_assert_msg(atomic_load(&B.errors) == 0, "%s", B.why);
	ck_assert_int_gt(atomic_load(&B.sums), 10);
	ck_assert_int_eq(bank_sum(db, false), BANK_TOTAL);
	munmap(Bp, sizeof(bank));
	tu_close_and_wait(db);
}
END_TEST

/* ---------------------------------------------------------------- misuse */

static int use_inherited(void *arg)
{
	walrus_txn *t = arg;
	TU_CHILD_CHECK(walrus_txn_put(t, "f", 1, "1", 1) == WALRUS_OK); /* process memory */
	TU_CHILD_CHECK(walrus_txn_commit(t, 0) == WALRUS_EMISUSE);
	return 0;
}

START_TEST(misuse_is_refused)
{
	walrus *db = tu_open(dir, opts()), *other = tu_open(dir, opts());
	put(db, "k", "v");
	walrus_snapshot *s;
	ck_assert_int_eq(walrus_snapshot_take(db, &s), WALRUS_OK);
	char b[8];
	size_t vl;
	ck_assert_int_eq(walrus_get_into_at(other, s, "k", 1, b, sizeof(b), &vl), WALRUS_EMISUSE);
	ck_assert_ptr_nonnull(strstr(walrus_errmsg(), "another handle"));
	walrus_txn *t;
	ck_assert_int_eq(walrus_txn_begin(db, 0, &t), WALRUS_OK);
	walrus_iter *it;
	ck_assert_int_eq(walrus_txn_iter_open(t, NULL, 0, NULL, 0, &it), WALRUS_OK);
	ck_assert_int_eq(walrus_txn_put(t, "k", 1, "w", 1), WALRUS_OK);
	/* In a forked child: refused, nothing committed. */
	ck_assert_int_eq(tu_wait(tu_fork(use_inherited, t)), 0);
	ck_assert_str_eq(at(db, NULL, "k", b, sizeof(b)), "v");
	ck_assert_int_eq(walrus_txn_commit(t, 0), WALRUS_OK);
	ck_assert_int_eq(walrus_txn_commit(t, 0), WALRUS_EMISUSE); /* twice */
	ck_assert_int_eq(walrus_txn_put(t, "k", 1, "x", 1), WALRUS_EMISUSE);
	ck_assert_int_eq(walrus_iter_next(it), WALRUS_EMISUSE); /* its transaction ended */
	ck_assert_int_eq(walrus_iter_valid(it), 0);
	walrus_iter_close(it);
	walrus_txn_free(t);
	ck_assert_str_eq(at(db, NULL, "k", b, sizeof(b)), "w");
	/* After its handle closed. */
	ck_assert_int_eq(walrus_txn_begin(db, 0, &t), WALRUS_OK);
	ck_assert_int_eq(walrus_iter_open_at(db, s, NULL, 0, NULL, 0, &it), WALRUS_OK);
	walrus_iter *plain;
	ck_assert_int_eq(walrus_iter_open(db, NULL, 0, NULL, 0, &plain), WALRUS_OK);
	ck_assert_int_eq(walrus_iter_valid(plain), 1);
	ck_assert_int_eq(walrus_close(db), WALRUS_OK);
	/* An iterator over the tree ends with its handle (it pointed at the freed
	 * handle: a use after free, which ASan reports, without the ending). */
	ck_assert_int_eq(walrus_iter_next(plain), WALRUS_EMISUSE);
	ck_assert_int_eq(walrus_iter_seek(plain, "k", 1), WALRUS_EMISUSE);
	ck_assert_int_eq(walrus_iter_valid(plain), 0);
	walrus_iter_close(plain);
	ck_assert_int_eq(walrus_get_into_at(NULL, s, "k", 1, b, sizeof(b), &vl), WALRUS_EMISUSE);
	ck_assert_int_eq(walrus_txn_put(t, "k", 1, "y", 1), WALRUS_EMISUSE);
	ck_assert_int_eq(walrus_txn_commit(t, 0), WALRUS_EMISUSE);
	ck_assert_int_eq(walrus_iter_next(it), WALRUS_EMISUSE);
	walrus_iter_close(it);
	walrus_txn_free(t);
	walrus_snapshot_release(s);
	ck_assert_str_eq(at(other, NULL, "k", b, sizeof(b)), "w");
	ck_assert_int_eq(tu_stat(other, "\"snapshots\"", "live"), 0);
	/* Bad arguments. */
	ck_assert_int_eq(walrus_txn_begin(other, 0x10, &t), WALRUS_EINVAL);
	ck_assert_int_eq(walrus_snapshot_take(other, NULL), WALRUS_EINVAL);
	ck_assert_int_eq(walrus_txn_begin(other, 0, &t), WALRUS_OK);
	ck_assert_int_eq(walrus_txn_put(t, "", 0, "x", 1), WALRUS_EINVAL);
	ck_assert_int_eq(walrus_txn_commit(t, WALRUS_SYNC | WALRUS_ASYNC), WALRUS_EINVAL);
	ck_assert_int_eq(walrus_txn_abort(t), WALRUS_OK);
	ck_assert_int_eq(walrus_txn_abort(t), WALRUS_EMISUSE);
	walrus_txn_free(t);
	tu_close_and_wait(other);
}
END_TEST

static Suite *txn_suite(void)
{
	Suite *s = suite_create("txn");
	TCase *tc = tcase_create("txn");
	tcase_add_checked_fixture(tc, setup, NULL);
	tcase_set_timeout(tc, 240);
	tcase_add_test(tc, snapshot_sees_one_commit);
	tcase_add_test(tc, snapshot_scans_see_one_generation);
	tcase_add_test(tc, snapshot_scan_with_scattered_changes);
	tcase_add_test(tc, held_snapshot_keeps_versions_and_gives_them_back);
	tcase_add_test(tc, full_version_store_fails_the_oldest_snapshot);
	tcase_add_test(tc, old_snapshot_threshold_fails_reads);
	tcase_add_test(tc, no_lost_update);
	tcase_add_test(tc, write_skew_serializable_refuses_snapshot_allows);
	tcase_add_test(tc, phantom_insert_conflicts);
	tcase_add_test(tc, reads_see_own_writes);
	tcase_add_test(tc, txn_puts_go_to_the_leaves_their_reads_found);
	tcase_add_test(tc, txn_put_descends_when_its_leaf_changed_or_split);
	tcase_add_test(tc, commit_notes_versions_only_for_other_snapshots);
	tcase_add_test(tc, bank_total_holds);
	tcase_add_test(tc, misuse_is_refused);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run(txn_suite());
}
